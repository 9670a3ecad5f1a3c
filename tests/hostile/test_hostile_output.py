"""Text from input files (profile names, model input names) printed on one line, without control bytes."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import onnx
import yaml
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from compiler.core.text import printable
from tests.support.cli import assert_clean_error, run_cli
from tests.support.digits import run_calibrate

FORGED = "x\nerror: forged\r\x1b[31mred\x1b]0;title\x07\x9b2J\u2028tail"
"""A newline that would start a second ``error:`` line, a carriage return, ESC sequences (colour, window title),
a C1 CSI and a Unicode line separator."""
WIDE = {**os.environ, "COLUMNS": "400"}
"""Tables wide enough that no cell folds (pytest sets COLUMNS to its terminal's width)."""
RAW = ("\n", "\r", "\x1b", "\x07", "\x9b", "\u2028")


def _assert_no_raw_controls(stdout: str, stderr: str = "") -> None:
    """Nothing but the printer's own line ends: none from a name."""
    for stream in (stdout, stderr.removesuffix("\n")):
        for char in RAW[1:] if stream is stdout else RAW:
            assert char not in stream, (char, stream)
    assert not any(row.startswith("error:") for row in stdout.splitlines())


def _forged_model(path: Path) -> Path:
    """A real model whose input and output names hold newlines and escape codes (ONNX allows any string)."""
    output = "y" + FORGED
    graph = helper.make_graph(
        [helper.make_node("Relu", [FORGED], [output])],
        "g",
        [helper.make_tensor_value_info(FORGED, TensorProto.FLOAT, ["B", 1, 8, 8])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["B", 1, 8, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_profile_and_input_names_cannot_forge_error_lines(tmp_path, digits_model):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {
                        "name": FORGED,
                        "shapes": {FORGED: {"min": [1, 1, 8, 8], "opt": [1, 1, 8, 8], "max": [8, 1, 8, 8]}},
                    }
                ]
            }
        )
    )
    done = run_cli("inspect", digits_model, "--profiles", profiles, env=WIDE)
    line = assert_clean_error(
        done, 2, "profiles.yaml", "profile 'x\\nerror: forged\\r\\x1b[31mred", "is not a model input"
    )
    assert "\\u2028tail" in line
    _assert_no_raw_controls(done.stdout, done.stderr)
    assert "profile 'x\\nerror: forged" in done.stdout  # the problems listed on stdout, one line each


def test_model_input_names_are_escaped_in_tables_and_errors(tmp_path):
    model = _forged_model(tmp_path / "forged.onnx")
    shown = run_cli("inspect", model, env=WIDE)
    assert shown.exit_code == 0, shown.stderr
    _assert_no_raw_controls(shown.stdout)
    assert "x\\nerror: forged\\r\\x1b[31mred" in shown.stdout
    doc = run_cli("inspect", model, "--json")  # machine output keeps the names as they are (JSON escapes them)
    assert doc.exit_code == 0, doc.stderr
    assert [i["name"] for i in json.loads(doc.stdout)["model"]["inputs"]] == [FORGED]
    failed = run_calibrate(tmp_path / "out", model=model)
    assert_clean_error(failed, 2, "digits.npz", "x\\nerror: forged\\r\\x1b[31mred\\x1b]0;title\\x07")
    _assert_no_raw_controls(failed.stdout, failed.stderr)


BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@given(st.text())
def test_printable_is_one_line_without_control_characters(text):
    shown = printable(text)
    assert len(shown.splitlines()) <= 1
    assert not [char for char in shown if unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs") or char in BIDI], shown
    assert printable(shown) == shown  # idempotent: an escaped message is not escaped again


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_printable_ascii_is_left_alone(text):
    assert printable(text) == text
