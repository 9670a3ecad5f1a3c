"""A pipeline file's mistakes, all of them at once (issue 43, footgun 5), through the real CLI: each with its field
and its line, in the order of the file, on one error line; one mistake reads as it always did."""

from __future__ import annotations

import pytest

from tests.support.cli import REPO, assert_clean_error, run_cli

MISTAKES = f"""\
model: {REPO}/compiler/examples/digits_cnn.onnx
profiles: {REPO}/profiles/digits.yaml
targets:
  rtx-4090: [fp32, fp64]
  rtx-3090: {{precisions: [fp16], backend: nope}}
store: s3:/models/team
colour: blue
check:
  samples: -3
"""


@pytest.mark.parametrize("command", ["plan", "release"])
def test_every_mistake_is_listed_with_its_field_and_line(command, tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(MISTAKES)
    args = ("--dry-run",) if command == "release" else ()
    line = assert_clean_error(run_cli(command, pipeline, *args), 2, f"{pipeline}: 6 problems: ")
    listed = line.split(" problems: ", 1)[1].split("; line ")
    assert [item.split(":", 1)[0].removeprefix("line ") for item in listed] == ["1", "4", "5", "6", "7", "9"]
    for fragment in (
        "line 1: release: Field required",
        "line 4: targets.rtx-4090.precisions[1]: Input should be",
        "line 5: targets.rtx-3090.backend: unknown backend 'nope'",
        "line 6: store: did you mean s3://models/team?",
        "line 7: colour: unknown key",
        "line 9: check.samples:",
    ):
        assert fragment in line, (fragment, line)


def test_one_mistake_reads_as_before_and_many_are_counted_past_twenty(tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: {name: digits, version: 1.0.0}\n" + MISTAKES.split("targets:")[0] + "targets: {}\n")
    assert_clean_error(run_cli("plan", pipeline), 2, f"{pipeline} line 4: targets: ")
    pipeline.write_text(MISTAKES + "".join(f"extra{i}: 1\n" for i in range(30)))
    line = assert_clean_error(run_cli("plan", pipeline), 2, "36 problems: ", "(and 16 more)")
    assert line.count("unknown key") == 20 - 5  # the first 20 listed: 5 other mistakes come first
