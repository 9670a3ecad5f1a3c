"""Shape profiles: every validation rule, through the Python API and through `compile inspect --profiles`."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from compiler.core.errors import InvalidInput
from compiler.core.profiles import ProfileSet, load_profiles, load_sku_catalog, validate_profiles
from compiler.data.model import load_model
from tests.support import synthetic
from tests.support.cli import REPO, assert_clean_error, run_cli
from tests.support.digits import run_build

TEXT = {"input_ids": ["B", "S"], "attention_mask": ["B", "S"]}
"""The inputs of a BERT-like model: two inputs sharing the symbolic dims B and S."""


def profiles(*entries: dict) -> ProfileSet:
    return ProfileSet.model_validate({"profiles": list(entries)})


def text_shapes(batch=(1, 4, 8), seq=(16, 64, 128), mask_batch=None, mask_seq=None) -> dict:
    def shape(b, s):
        return {"min": [b[0], s[0]], "opt": [b[1], s[1]], "max": [b[2], s[2]]}

    return {"input_ids": shape(batch, seq), "attention_mask": shape(mask_batch or batch, mask_seq or seq)}


@pytest.fixture(scope="module")
def text_model(tmp_path_factory) -> Path:
    """A real two-input model (a tiny BERT) with inputs input_ids/attention_mask [B, S]."""
    return synthetic.bert_base(
        tmp_path_factory.mktemp("text") / "bert_tiny.onnx", layers=1, hidden=32, heads=2, vocab=50, max_positions=256
    )


def write(tmp_path: Path, data, name="profiles.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


# --- the rules, through the Python API ------------------------------------------------------------------------


def test_valid_profiles_have_no_errors(text_model):
    inputs = load_model(text_model).input_dims()
    assert inputs == TEXT
    assert (
        validate_profiles(
            profiles(
                {"name": "short", "shapes": text_shapes()}, {"name": "long", "shapes": text_shapes(seq=(128, 256, 256))}
            ),
            inputs,
        )
        == []
    )


def test_every_dynamic_input_must_be_covered():
    errors = validate_profiles(profiles({"name": "online", "shapes": {"input_ids": text_shapes()["input_ids"]}}), TEXT)
    assert errors == ["profile 'online': dynamic input 'attention_mask' (dims [B, S]) has no shape; add min/opt/max"]
    # A static input may be left out.
    assert (
        validate_profiles(
            profiles({"name": "p", "shapes": {"x": {"min": [1], "opt": [1], "max": [2]}}}), {"x": ["N"], "scale": [3]}
        )
        == []
    )


def test_unknown_input_names_are_errors():
    shapes = {**text_shapes(), "token_type_ids": text_shapes()["input_ids"]}
    errors = validate_profiles(profiles({"name": "online", "shapes": shapes}), TEXT)
    assert errors == [
        "profile 'online': input 'token_type_ids' is not a model input (model inputs: input_ids, attention_mask)"
    ]


def test_rank_must_match_the_model():
    shapes = text_shapes()
    shapes["input_ids"] = {"min": [1, 16, 1], "opt": [4, 64, 1], "max": [8, 128, 1]}
    errors = validate_profiles(profiles({"name": "online", "shapes": shapes}), TEXT)
    assert errors == [
        "profile 'online': input 'input_ids': shapes have rank 3 but the model's input has rank 2 (dims [B, S])"
    ]
    shapes["input_ids"] = {"min": [1, 16], "opt": [4, 64, 1], "max": [8, 128]}
    errors = validate_profiles(profiles({"name": "online", "shapes": shapes}), TEXT)
    assert errors == [
        "profile 'online': input 'input_ids': min, opt and max have different ranks (min 2, opt 3, max 2)"
    ]


def test_static_dims_must_match_the_model():
    image = {"image": ["B", 3, 224, 224]}
    shape = {"min": [1, 3, 224, 224], "opt": [4, 1, 224, 224], "max": [8, 3, 224, 256]}
    errors = validate_profiles(profiles({"name": "serving", "shapes": {"image": shape}}), image)
    assert errors == [
        "profile 'serving': input 'image' dim 1 is static 3 in the model, but the profile gives min/opt/max "
        "[3, 1, 3]; use 3 for all three",
        "profile 'serving': input 'image' dim 3 is static 224 in the model, but the profile gives min/opt/max "
        "[224, 224, 256]; use 224 for all three",
    ]


@pytest.mark.parametrize(
    ("batch", "bad"),
    [((0, 4, 8), "[0, 4, 8]"), ((4, 2, 8), "[4, 2, 8]"), ((1, 9, 8), "[1, 9, 8]"), ((-1, 1, 1), "[-1, 1, 1]")],
)
def test_dynamic_dims_need_1_le_min_le_opt_le_max(batch, bad):
    errors = validate_profiles(profiles({"name": "p", "shapes": text_shapes(batch=batch)}), TEXT)
    assert f"profile 'p': input 'input_ids' dim 0 ('B'): needs 1 <= min <= opt <= max, got min/opt/max {bad}" in errors
    assert (
        f"profile 'p': input 'attention_mask' dim 0 ('B'): needs 1 <= min <= opt <= max, got min/opt/max {bad}"
        in errors
    )
    assert len(errors) == 2


def test_shared_symbolic_dims_need_the_same_range():
    errors = validate_profiles(profiles({"name": "online", "shapes": text_shapes(mask_seq=(16, 64, 256))}), TEXT)
    assert errors == [
        "profile 'online': symbolic dim 'S' is shared by input 'input_ids' dim 1 (min/opt/max "
        "[16, 64, 128]) and input 'attention_mask' dim 1 (min/opt/max [16, 64, 256]); give them the "
        "same range"
    ]
    errors = validate_profiles(profiles({"name": "batch", "shapes": text_shapes(mask_batch=(1, 8, 8))}), TEXT)
    assert len(errors) == 1 and "symbolic dim 'B'" in errors[0] and "dim 0" in errors[0]
    # Within one input too: a square matrix [N, N].
    square = {"m": {"min": [2, 2], "opt": [4, 8], "max": [8, 8]}}
    [error] = validate_profiles(profiles({"name": "sq", "shapes": square}), {"m": ["N", "N"]})
    assert "symbolic dim 'N' is shared by input 'm' dim 0" in error and "input 'm' dim 1" in error
    # Unnamed dynamic dims (None) are independent of each other.
    assert validate_profiles(profiles({"name": "free", "shapes": square}), {"m": [None, None]}) == []


def test_every_profile_is_checked_and_named():
    errors = validate_profiles(
        profiles(
            {"name": "short", "shapes": text_shapes()},
            {"name": "long", "shapes": text_shapes(seq=(256, 128, 512))},
            {"name": "odd", "shapes": {"input_ids": text_shapes()["input_ids"]}},
        ),
        TEXT,
    )
    assert [e.split(":")[0] for e in errors] == ["profile 'long'", "profile 'long'", "profile 'odd'"]


def test_unknown_rank_inputs_accept_any_rank_but_must_be_covered():
    inputs = {"x": None}
    ok = {"x": {"min": [1, 2, 3], "opt": [1, 2, 3], "max": [4, 2, 3]}}
    assert validate_profiles(profiles({"name": "p", "shapes": ok}), inputs) == []
    bad = {"x": {"min": [2], "opt": [1], "max": [4]}}
    assert validate_profiles(profiles({"name": "p", "shapes": bad}), inputs) == [
        "profile 'p': input 'x' dim 0: needs 1 <= min <= opt <= max, got min/opt/max [2, 1, 4]"
    ]
    assert validate_profiles(
        profiles({"name": "p", "shapes": {"y": {"min": [1], "opt": [1], "max": [1]}}}), {"x": None, "y": [1]}
    ) == ["profile 'p': input 'x' has an unknown rank (dynamic); add min/opt/max for it"]


# --- the file format --------------------------------------------------------------------------------------------


def test_several_named_profiles_per_file(tmp_path):
    path = write(
        tmp_path,
        {
            "profiles": [
                {"name": "online", "shapes": text_shapes()},
                {"name": "batch", "shapes": text_shapes(batch=(8, 32, 64))},
            ]
        },
    )
    loaded = load_profiles(path)
    assert [p.name for p in loaded.profiles] == ["online", "batch"]
    assert loaded.profiles[1].shapes["input_ids"].opt == [32, 64]


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "profiles:\n  - {name: a, shapes: {x: {min: [1], opt: [1], max: [1]}}}\n"
            "  - {name: a, shapes: {x: {min: [1], opt: [1], max: [1]}}}\n",
            ["profile names must be unique; repeated: a"],
        ),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: [1, 3], max: [4, 3]}}}\n",
            ["profile 'online' input 'image' opt: Field required"],
        ),
        ("profiles:\n  - {shapes: {image: {min: [1], opt: [1], max: [1]}}}\n", ["profiles[0] name: Field required"]),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: [1, 3], opt: [two, 3], max: [4, 3]}}}\n",
            ["profile 'online' input 'image' opt[0]: Input should be a valid integer"],
        ),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: [1, 3], opt: [2.5, 3], max: [4, 3]}}}\n",
            ["profile 'online' input 'image' opt[0]: Input should be a valid integer"],
        ),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: [true, 3], opt: [1, 3], max: [4, 3]}}}\n",
            ["profile 'online' input 'image' min[0]: Input should be a valid integer"],
        ),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: 1, opt: [1], max: [4]}}}\n",
            ["profile 'online' input 'image' min: Input should be a valid list"],
        ),
        (
            "profiles:\n  - {name: online, shapes: {image: {min: [1], opt: [1], max: [4], mid: [2]}}}\n",
            ["profile 'online' input 'image' mid: unknown key; expected min, opt, max"],
        ),
        (
            "profiles:\n  - {name: online, shape: {image: {min: [1], opt: [1], max: [4]}}}\n",
            ["profile 'online' shapes: Field required", "(and 1 more)"],
        ),
        ("profiles:\n  - {name: online, shapes: {}}\n", ["profile 'online' shapes: empty; give min, opt and max"]),
        ("profiles: []\n", ["profiles: empty; list at least one profile"]),
        ("profile:\n  - {name: a}\n", ["profiles: Field required"]),
        ("", ["profiles: Field required"]),
        ("- online\n- batch\n", ["expected a YAML mapping at the top level, got a list"]),
        ("just some words\n", ["expected a YAML mapping at the top level, got a string"]),
        ("profiles: [\n  {name: a\n", ["not valid YAML", "line"]),
        (
            "profiles:\n  - name: a\n    shapes:\n      x: {min: [1], opt: [1], max: [1]}\n"
            "      x: {min: [2], opt: [2], max: [2]}\n",
            ["not valid YAML", "duplicate key 'x'", "line 5"],
        ),
    ],
)
def test_schema_errors(tmp_path, text, fragments):
    path = write(tmp_path, text)
    with pytest.raises(InvalidInput) as caught:
        load_profiles(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_python_tags_are_rejected_by_the_safe_loader(tmp_path, digits_model):
    marker = tmp_path / "pwned"
    path = write(tmp_path, f'!!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(InvalidInput, match=r"not valid YAML.*python/object/apply:os\.system"):
        load_profiles(path)
    path = write(tmp_path, "profiles:\n  - name: !!python/name:os.getcwd ''\n    shapes: {}\n", "name_tag.yaml")
    with pytest.raises(InvalidInput, match="not valid YAML"):
        load_profiles(path)
    result = run_cli("inspect", digits_model, "--profiles", tmp_path / "profiles.yaml")
    assert_clean_error(result, 2, "profiles.yaml", "not valid YAML", "python/object/apply")
    assert not marker.exists()


def test_unreadable_profile_files(tmp_path):
    with pytest.raises(InvalidInput, match="file not found"):
        load_profiles(tmp_path / "nope.yaml")
    with pytest.raises(InvalidInput, match="is not a file"):
        load_profiles(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00profiles")
    with pytest.raises(InvalidInput, match="not UTF-8"):
        load_profiles(binary)


def test_a_device_that_never_ends_is_an_error_not_a_hang(tmp_path):
    with pytest.raises(InvalidInput, match="larger than 16 MiB"):
        load_profiles("/dev/zero")
    result = run_build(
        tmp_path / "out", ("rtx-4090",), ("fp32",), "--cache-dir", tmp_path / "cache", profiles="/dev/zero", timeout=60
    )
    assert_clean_error(result, 2, "/dev/zero", "larger than 16 MiB", "check the path")
    assert not (tmp_path / "out").exists()


def test_profiles_from_a_pipe_as_process_substitution_gives_them(digits_profiles, tmp_path):
    """`--profiles <(generate-profiles)` hands the CLI a pipe: read once, to its end."""
    fifo = tmp_path / "profiles.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(digits_profiles.read_bytes(),))
    writer.start()
    result = run_build(
        tmp_path / "out",
        ("rtx-4090",),
        ("fp32",),
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        profiles=fifo,
        timeout=300,
    )
    writer.join()
    assert result.exit_code == 0, result.stderr
    record = json.loads((tmp_path / "out" / "rtx-4090" / "fp32" / "engine.json").read_text())
    assert [p["name"] for p in record["profiles"]] == [p.name for p in load_profiles(digits_profiles).profiles]


def test_bundled_profiles_and_sku_catalog():
    digits = load_profiles(REPO / "profiles" / "digits.yaml")
    assert [p.name for p in digits.profiles] == ["online", "batch"]
    assert validate_profiles(digits, {"image": ["B", 1, 8, 8]}) == []
    catalog = load_sku_catalog()
    for sku, capability, backend in [
        ("rtx-3090", "8.6", "tensorrt-rtx"),
        ("rtx-4090", "8.9", "tensorrt-rtx"),
        ("rtx-5090", "12.0", "tensorrt-rtx"),
        ("a100", "8.0", "tensorrt"),
        ("l4", "8.9", "tensorrt"),
        ("h100", "9.0", "tensorrt"),
        ("h200", "9.0", "tensorrt"),
    ]:
        assert (catalog.get(sku).compute_capability, catalog.get(sku).backend) == (capability, backend)
    with pytest.raises(
        InvalidInput, match=r"unknown SKU 'rtx-9090'; did you mean rtx-\d090.*\? known SKUs: .*rtx-4090"
    ):
        catalog.get("rtx-9090")


# --- through the command line ---------------------------------------------------------------------------------


def test_cli_reports_every_error_and_exits_2(tmp_path, text_model):
    path = write(
        tmp_path,
        {
            "profiles": [
                {"name": "online", "shapes": text_shapes(mask_seq=(16, 64, 256))},
                {
                    "name": "batch",
                    "shapes": {
                        "input_ids": {"min": [8, 16, 1], "opt": [8, 16, 1], "max": [8, 16, 1]},
                        "token_type_ids": {"min": [1, 1], "opt": [1, 1], "max": [1, 1]},
                    },
                },
            ]
        },
    )
    result = run_cli("inspect", text_model, "--profiles", path, "--json")
    line = assert_clean_error(
        result, 2, str(path), "profile 'online'", "symbolic dim 'S'", "attention_mask", "(and 3 more)"
    )
    assert line.startswith(f"error: {path}: ")
    report = json.loads(result.stdout)["profiles"]
    assert report["valid"] is False and report["names"] == ["online", "batch"]
    errors = report["errors"]
    assert len(errors) == 4
    assert errors[1] == (
        "profile 'batch': input 'token_type_ids' is not a model input (model inputs: input_ids, attention_mask)"
    )
    assert "profile 'batch': input 'input_ids': shapes have rank 3" in errors[2]
    assert errors[3].startswith("profile 'batch': dynamic input 'attention_mask' (dims [B, S]) has no shape")
    # The human report lists them all too, then the one error line.
    result = run_cli("inspect", text_model, "--profiles", path)
    assert result.exit_code == 2
    assert "invalid" in result.stdout and "token_type_ids" in result.stdout
    assert len(result.error_lines) == 1


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "profiles:\n  - {name: online, shapes: {input_ids: {min: [1, 8], opt: [x, 8], max: [4, 8]}}}\n",
            ["profile 'online' input 'input_ids' opt[0]: Input should be a valid integer"],
        ),
        (
            "profiles:\n  - {name: a, shapes: {input_ids: {min: [1], opt: [1], max: [1]}}}\n"
            "  - {name: a, shapes: {input_ids: {min: [1], opt: [1], max: [1]}}}\n",
            ["repeated: a"],
        ),
        ("not: [valid\n", ["not valid YAML"]),
    ],
)
def test_cli_schema_errors_exit_2(tmp_path, text_model, text, fragments):
    path = write(tmp_path, text)
    result = run_cli("inspect", text_model, "--profiles", path, "--json")
    assert_clean_error(result, 2, str(path), *fragments)
    assert result.stdout == ""


def test_cli_valid_profiles_build_on_a_two_input_model(tmp_path, text_model):
    path = write(
        tmp_path,
        {
            "profiles": [
                {"name": "short", "shapes": text_shapes(seq=(8, 32, 64))},
                {"name": "long", "shapes": text_shapes(seq=(64, 128, 256))},
            ]
        },
    )
    result = run_cli("inspect", text_model, "--profiles", path, "--build-check", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["profiles"] == {"file": str(path), "names": ["short", "long"], "valid": True, "errors": []}
    assert report["tensorrt"]["build_check"]["status"] == "ok"
    assert "short, long" in report["tensorrt"]["build_check"]["detail"]
    missing = run_cli("inspect", text_model, "--profiles", tmp_path / "absent.yaml")
    assert_clean_error(missing, 2, "absent.yaml", "file not found")
