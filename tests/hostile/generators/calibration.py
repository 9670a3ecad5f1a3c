"""Calibration folders given to compile build."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.hostile.generators.common import (
    AMBIGUOUS,
    FAILED_VERDICT,
    INVALID,
    RESIGNED,
    UNREADABLE,
    VALID,
    Made,
    flip_bits,
    make_fifo,
    model_bytes,
)
from tests.hostile.generators.models import model_verdict


def _record(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "calibration.json").read_text())


def _save_record(folder: Path, record: Any) -> None:
    (folder / "calibration.json").write_text(json.dumps(record, indent=2))


def _resign(folder: Path, name: str) -> None:
    import hashlib

    record = _record(folder)
    record["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    _save_record(folder, record)


RECORD_FIELD_TYPES: dict[str, str] = {
    "format_version": "int",
    "precision": "str",
    "method": "str?",
    "model": "str",
    "model_sha256": "str",
    "data": "str",
    "data_kind": "str",
    "data_sha256": "str",
    "samples": "int",
    "holdout_samples": "int",
    "batch_size": "int",
    "seed": "int",
    "options": "dict",
    "versions": "dict",
    "cache_key": "str",
    "ranges": "dict",
    "trt_cache_header": "str?",
    "files": "dict",
    "out": "str",
    "seconds": "float",
}
"""calibration.json's fields (docs/formats.md) and their JSON types; ``?`` marks the nullable ones."""

WRONG_VALUES: dict[str, tuple[Any, ...]] = {
    "int": ([], {}, "abc", [1], {"v": 1}, 1.5),
    "str": ([], {}, 5, 1.5, True, ["model.onnx"]),
    "dict": ([], "x", 5, [["k", "v"]], True),
    "float": ([], {}, "fast", [1.0]),
}
"""Values of the wrong JSON type for a field of each type, none of which a lenient reader would coerce (no
numeric strings, no null)."""


@dataclass(frozen=True)
class CalibrationFolder:
    """A copy of the session's valid int8 calibration folder, then one thing done to it."""

    kind: str
    detail: Any = None
    where: int = 0

    def write(self, box, source: Path) -> Made:
        import shutil

        folder = box.inputs / "calibration"
        shutil.copytree(source, folder, symlinks=True)
        if self.kind == "intact":
            return Made(folder, VALID, ("calibration",))
        if self.kind == "asked-precision":  # the int8 folder, asked for another calibrated precision
            return Made(folder, INVALID, ("calibration.json", "calibration"), ("--precision", self.detail))
        if self.kind in RECORD_CHANGES:
            return Made(folder, *self._change_record(folder))
        if self.kind == "verdict":
            return self._verdict(box, folder)
        damage = {
            "record-bytes": self._record_bytes,
            "model-file": self._model_file,
            "record-link": self._record_link,
            "not-a-folder": self._not_a_folder,
            "extra-files": self._extra_files,
            "damaged-model": self._damaged_model,
            "damaged-model-resigned": self._damaged_model,
            "damaged-other-file": self._damaged_other_file,
        }.get(self.kind)
        if damage is None:
            raise AssertionError(self.kind)
        return Made(folder, *damage(box, folder, source))

    def _change_record(self, folder: Path) -> tuple[str, tuple[str, ...]]:
        """One field of calibration.json changed (RECORD_CHANGES), the record saved as JSON again."""
        record = _record(folder)
        change, names = RECORD_CHANGES[self.kind]
        change(record, self.detail)
        _save_record(folder, record)
        # an unknown field may be ignored, a JSON reader may take the string "2" for the number, and a traversal
        # in the files list may be refused as such or as a file that is not there
        ambiguous = self.kind == "field-unknown" or (self.kind, self.detail) in (
            ("format-version", "2"),
            ("files-list", "traversal"),
        )
        return (AMBIGUOUS if ambiguous else INVALID), names

    def _record_bytes(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        verdict = INVALID
        data = {
            "missing": None,
            "empty": b"",
            "random": bytes(range(256)) * 4,
            "truncated": (folder / "calibration.json").read_bytes()[: 10 + self.where % 400],
            "array": b"[]",
            "null": b"null",
            "string": b'"calibration"',
            "deep": b"[" * 100_000 + b"]" * 100_000,
            "deep-object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
            "nan-literal": None,
            "utf16": json.dumps(_record(folder)).encode("utf-16"),
            "huge-number": None,
            "giant": None,
        }[self.detail]
        record = folder / "calibration.json"
        if self.detail == "missing":
            record.unlink()
        elif self.detail == "nan-literal":  # Python's json writes NaN: not JSON, but a float to a lenient reader
            text = record.read_text()
            record.write_text(text.replace('"seconds": ', '"seconds": NaN, "_": ', 1))
            verdict = AMBIGUOUS
        elif self.detail == "huge-number":
            text = record.read_text()
            record.write_text(text.replace('"samples": ', '"samples": 1' + "0" * 5000 + ', "_": ', 1))
        elif self.detail == "giant":
            with open(record, "ab") as handle:
                handle.truncate((64 << 20) + 1 + self.where % 1000)
        else:
            record.write_bytes(data)
        return verdict, ("calibration.json", "calibration")

    def _model_file(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        model, outside, verdict = folder / "model.onnx", box.outside / "model.onnx", INVALID
        if self.detail == "missing":
            model.unlink()
        elif self.detail == "directory":
            model.unlink()
            model.mkdir()
        elif self.detail == "fifo":
            model.unlink()
            make_fifo(model)
        elif self.detail == "symlink-out":
            model.rename(outside)
            model.symlink_to(outside)
        elif self.detail == "symlink-out-fifo":
            model.unlink()
            make_fifo(outside)
            model.symlink_to(outside)
        elif self.detail == "dangling":
            model.unlink()
            model.symlink_to(folder / "gone.onnx")
        elif self.detail == "hardlink-out":  # the same inode as a file outside: its bytes still match
            model.rename(outside)
            os.link(outside, model)
            verdict = AMBIGUOUS
        return verdict, ("model.onnx", "calibration")

    def _record_link(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        record = folder / "calibration.json"
        target = box.outside / "calibration.json" if self.detail == "out" else folder / "real.json"
        record.rename(target)
        record.symlink_to(target)
        return INVALID, ("calibration.json",)

    def _not_a_folder(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        import shutil

        shutil.rmtree(folder)
        if self.detail == "file":
            folder.write_bytes(b"{}")
        elif self.detail == "fifo":
            make_fifo(folder)
        elif self.detail == "link-out":
            shutil.copytree(source, box.outside / "calibration", symlinks=True)
            folder.symlink_to(box.outside / "calibration")
            return VALID, ("calibration",)  # the folder itself may be a link: every file resolves inside its target
        return INVALID, ("calibration",)

    def _extra_files(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        verdict = INVALID
        if self.detail == "notes":
            (folder / "notes.txt").write_text("extra\n")
            verdict = VALID
        elif self.detail == "subfolder":
            (folder / "old").mkdir()
            (folder / "old" / "model.onnx").write_bytes(b"junk")
            verdict = VALID
        elif self.detail == "stray-external-data":  # a model.onnx.data that model.onnx does not reference
            (folder / "model.onnx.data").write_bytes(b"\0" * 1024)
            verdict = AMBIGUOUS
        elif self.detail == "link-out":  # a stray link the build never reads: refusing it is within bounds
            (box.outside / "secret").write_text("secret\n")
            (folder / "secret").symlink_to(box.outside / "secret")
            verdict = AMBIGUOUS
        return verdict, ("calibration",)

    def _damaged_model(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        model, verdict = folder / "model.onnx", INVALID
        data = model.read_bytes()
        how, amount = self.detail
        if how == "truncated":
            damaged = data[: amount % len(data)]
        elif how == "bit-flipped":
            damaged = flip_bits(data, [(amount, amount % 8), (amount * 31 + 7, (amount + 5) % 8)])
        else:  # another model entirely: the FP32 source
            damaged = model_bytes()
        model.write_bytes(damaged)
        if self.kind == "damaged-model-resigned":
            _resign(folder, "model.onnx")
            verdict = RESIGNED if model_verdict(damaged) != UNREADABLE else INVALID
        return verdict, ("model.onnx", "calibration")

    def _verdict(self, box, folder: Path) -> Made:
        """verdict.json replaced (VERDICTS); ``where`` odd: the build is given --allow-failed, which takes a failed
        verdict but nothing damaged."""
        verdict, how, passing = folder / "verdict.json", self.detail, b'{"passed": true, "failed": []}'
        data, expected = VERDICTS[how]
        verdict.unlink(missing_ok=True)
        if data is not None:
            verdict.write_bytes(data)
        elif how == "directory":
            verdict.mkdir()
        elif how == "fifo":
            make_fifo(verdict)
        elif how in ("link-out", "dangling"):
            (box.outside / "verdict.json").write_bytes(passing)
            verdict.symlink_to(box.outside / ("verdict.json" if how == "link-out" else "gone.json"))
        elif how == "giant":
            verdict.write_bytes(passing)
            with open(verdict, "ab") as handle:
                handle.truncate((64 << 20) + 1 + self.where % 1000)
        allowed = self.where % 2 == 1
        if allowed and expected == FAILED_VERDICT:
            expected = VALID
        return Made(folder, expected, ("verdict.json", "calibration"), flags=("--allow-failed",) if allowed else ())

    def _damaged_other_file(self, box, folder: Path, source: Path) -> tuple[str, tuple[str, ...]]:
        """Files the build does not read; the record no longer matches them."""
        (folder / self.detail).write_bytes(b"damaged\n")
        return AMBIGUOUS, ("calibration",)


VERDICTS: dict[str, tuple[bytes | None, str]] = {
    "missing": (None, VALID),  # a folder from before verdicts were kept
    "passed": (b'{"passed": true, "failed": []}', VALID),
    "failed": (
        b'{"passed": false, "failed": ["output logits: cosine mean 0.99 below --min-cosine 0.999"]}',
        FAILED_VERDICT,
    ),
    "failed-unnamed": (b'{"passed": false}', FAILED_VERDICT),
    "failed-not-a-list": (b'{"passed": false, "failed": "everything"}', FAILED_VERDICT),
    "unknown-field": (b'{"passed": true, "failed": [], "by": "someone"}', AMBIGUOUS),
    "passed-as-text": (b'{"passed": "true", "failed": []}', INVALID),
    "passed-as-number": (b'{"passed": 1, "failed": []}', INVALID),
    "array": (b"[true]", INVALID),
    "null": (b"null", INVALID),
    "empty": (b"", INVALID),
    "random": (bytes(range(256)) * 4, INVALID),
    "nan-literal": (b'{"passed": NaN}', INVALID),
    "deep": (b"[" * 100_000 + b"]" * 100_000, INVALID),
    "directory": (None, INVALID),
    "fifo": (None, INVALID),
    "link-out": (None, INVALID),  # a link to a passing verdict outside the folder
    "dangling": (None, INVALID),
    "giant": (None, INVALID),
}
"""verdict.json as compile build may find it (docs/formats.md, "verdict.json"): the bytes written in its place (None:
made otherwise) and the rule's verdict."""


def _files_list(record: dict[str, Any], detail: str) -> None:
    record["files"] = {
        "nothing": {},
        "no-model": {k: v for k, v in record["files"].items() if k != "model.onnx"},
        "traversal": {**record["files"], "../../outside/x": "0" * 64},
    }[detail]


RECORD_CHANGES: dict[str, tuple[Callable[[dict[str, Any], Any], object], tuple[str, ...]]] = {
    "field-type": (lambda r, d: r.update({d[0]: d[1]}), ("calibration.json",)),
    "field-missing": (lambda r, d: r.pop(d), ("calibration.json",)),
    "field-unknown": (lambda r, d: r.update({d: {"hostile": True}}), ("calibration",)),
    "format-version": (lambda r, d: r.update(format_version=d), ("calibration.json",)),
    "precision": (lambda r, d: r.update(precision=d), ("calibration.json",)),  # the build asks for int8
    "model-sha256": (lambda r, d: r.update(model_sha256=d), ("calibration.json",)),
    "files-sha256": (lambda r, d: r["files"].update({"model.onnx": d}), ("model.onnx", "calibration.json")),
    "files-list": (_files_list, ("calibration.json", "model.onnx")),
}
"""The kinds that change one field of calibration.json: kind -> (the change, given the detail; names at fault)."""


def _field_type_cases() -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(sorted(RECORD_FIELD_TYPES)).flatmap(
        lambda key: st.tuples(st.just(key), st.sampled_from(WRONG_VALUES[RECORD_FIELD_TYPES[key].rstrip("?")]))
    )


def calibration_recipes(kind: str) -> st.SearchStrategy[CalibrationFolder]:
    build = functools.partial(st.builds, CalibrationFolder, st.just(kind))
    return {
        "intact": build(),
        "record-bytes": build(
            st.sampled_from(
                [
                    "deep-object",
                    "empty",
                    "random",
                    "truncated",
                    "array",
                    "null",
                    "string",
                    "deep",
                    "missing",
                    "nan-literal",
                    "utf16",
                    "huge-number",
                    "giant",
                ]
            ),
            st.integers(0, 2**16),
        ),
        "field-type": build(_field_type_cases()),
        "field-missing": build(st.sampled_from(sorted(RECORD_FIELD_TYPES))),
        "field-unknown": build(st.sampled_from(["extra", "__class__", "report", ""])),
        "format-version": build(st.sampled_from([2**64, 1, 3, -1, 0, 2.5, "2", None])),
        "precision": build(st.sampled_from(["int8\n", "fp16", "fp32", "INT8", "int4", "", "fp8"])),
        "asked-precision": build(st.sampled_from(["fp8"])),
        "model-sha256": build(st.sampled_from(["0" * 64, "", "z" * 64, "57c4" * 16])),
        "files-sha256": build(st.sampled_from(["0" * 64, "", "../../etc/passwd", "A" * 64])),
        "files-list": build(st.sampled_from(["nothing", "no-model", "traversal"])),
        "model-file": build(
            st.sampled_from(
                ["symlink-out-fifo", "directory", "fifo", "symlink-out", "missing", "dangling", "hardlink-out"]
            )
        ),
        "record-link": build(st.sampled_from(["out", "inside"])),
        "not-a-folder": build(st.sampled_from(["fifo", "file", "missing", "link-out"])),
        "extra-files": build(st.sampled_from(["stray-external-data", "subfolder", "notes", "link-out"])),
        "damaged-model": build(
            st.tuples(st.sampled_from(["bit-flipped", "truncated", "fp32-source"]), st.integers(0, 2**20))
        ),
        "damaged-model-resigned": build(
            st.tuples(st.sampled_from(["bit-flipped", "truncated", "fp32-source"]), st.integers(0, 2**20))
        ),
        "damaged-other-file": build(st.sampled_from(["report.json", "calibration.cache"])),
        "verdict": build(st.sampled_from(sorted(VERDICTS)), st.integers(0, 2**16)),
    }[kind]


CALIBRATION_KINDS = (
    "intact",
    "record-bytes",
    "field-type",
    "field-missing",
    "field-unknown",
    "format-version",
    "precision",
    "asked-precision",
    "model-sha256",
    "files-sha256",
    "files-list",
    "model-file",
    "record-link",
    "not-a-folder",
    "extra-files",
    "damaged-model",
    "damaged-model-resigned",
    "damaged-other-file",
    "verdict",
)
