"""Reading a calibration folder (``compile calibrate``'s output) as a later stage does: trusted only as far as
its ``calibration.json`` vouches for it.

A folder may come from elsewhere (a store, a teammate, a cache on a shared volume): every file a reader uses
must be recorded there with its sha256 and still match, and none may be a link leading out of the folder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from compiler.core.errors import InvalidInput
from compiler.core.files import file_sha256
from compiler.core.record_files import parse_record, read_record_bytes
from compiler.core.records import CALIBRATION_RECORD, CalibrationRecord

RECORD = CALIBRATION_RECORD
RERUN = "re-run compile calibrate"
VOLATILE = {"seconds", "phases", "out", "model", "data", "build_proof"}
"""Fields of calibration.json that differ between runs and machines making the same calibration (build_proof says
how long its build took)."""


@dataclass(frozen=True)
class Calibration:
    folder: Path
    record: CalibrationRecord
    record_sha256: str

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def content_sha256(self) -> str:
        """What the calibration *is*, the same on every machine and run that made it from the same inputs: the
        record without the wall-clock seconds and the paths it was made at (the model's and data's digests stay),
        and without report.json's digest (its seconds change too; its figures follow from the model). What an
        engine and a release name as their calibration, so an unchanged re-release is the same release."""
        from compiler.core.files import hash_json

        files = {name: sha for name, sha in self.record.files.items() if name != "report.json"}
        content = self.record.model_dump(mode="json", exclude=VOLATILE) | {"files": files}
        if content.get("fallback"):
            content["fallback"] = {k: v for k, v in content["fallback"].items() if k != "seconds"}
        return hash_json(content)

    def verify(self, files: Iterable[Path], sha256: Callable[[Path], str] = file_sha256) -> list[str]:
        """Refuse any of ``files`` (what the reader is about to use) that the record does not list by name or
        whose bytes changed since it was written, and any that resolves outside the folder; their sha256, as the
        record lists them (what was compared, whatever the files hold by now)."""
        verified = []
        inside = self.folder.resolve()
        for file in map(Path, files):
            try:
                resolved = file.resolve()
            except (OSError, RuntimeError):  # RuntimeError: a link loop, before Python 3.13
                raise InvalidInput(f"{file}: a link that leads nowhere (a loop); {RERUN}") from None
            if not resolved.is_relative_to(inside):
                raise InvalidInput(
                    f"{file}: leads out of the calibration folder {self.folder} (a link to "
                    f"{resolved}); {RERUN} or copy the folder without links"
                )
            if not file.is_file():
                raise InvalidInput(f"{file}: missing from the calibration folder {self.folder}; {RERUN}")
            name = resolved.relative_to(inside).as_posix()
            recorded = self.record.files.get(name)
            if recorded is None:
                raise InvalidInput(
                    f"{file}: not recorded in {self.folder / RECORD}, so nothing vouches for it; {RERUN}"
                )
            if sha256(file) != recorded:
                raise InvalidInput(
                    f"{file}: changed since compile calibrate wrote it (its sha256 is not the one "
                    f"{RECORD} records); {RERUN}"
                )
            verified.append(recorded)
        return verified


def failed_gates(folder: Path) -> list[str] | None:
    """The gates the folder's calibration failed when ``compile calibrate`` last judged it (verdict.json), one line
    each; None when it passed or was never judged (a folder from before verdicts were kept: no verdict.json at all;
    a link, a folder or a FIFO in its place is refused like a damaged one)."""
    from compiler.core.jsonio import UnreadableJson, parse_json
    from compiler.core.records import CALIBRATION_VERDICT

    path = folder / CALIBRATION_VERDICT
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink():
        raise InvalidInput(f"{path}: is a link; {RERUN} or copy the folder without links")
    try:
        verdict = parse_json(read_record_bytes(path, RERUN), 1 << 20)
    except UnreadableJson as exc:
        raise InvalidInput(f"{path}: {exc}; {RERUN}") from None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("passed"), bool):
        raise InvalidInput(f"{path}: not a verdict of compile calibrate; {RERUN}")
    failed = verdict.get("failed")
    named = [str(f) for f in failed] if isinstance(failed, list) else []
    return None if verdict["passed"] else named or ["a gate it does not name"]


def read_calibration(folder: Path) -> Calibration:
    """The folder's record, validated; InvalidInput when it is missing, damaged or of another format."""
    record_path = folder / RECORD
    if not record_path.is_file():
        raise InvalidInput(f"{folder}: not a calibration folder (no {RECORD}; make one with compile calibrate)")
    if record_path.is_symlink():
        raise InvalidInput(f"{record_path}: is a link; {RERUN} or copy the folder without links")
    raw = read_record_bytes(record_path, RERUN)
    record = parse_record(raw, record_path, CalibrationRecord, RERUN)
    if "model.onnx" not in record.files:
        raise InvalidInput(f"{record_path}: records no model.onnx (its file list is damaged); {RERUN}")
    return Calibration(folder, record, hashlib.sha256(raw).hexdigest())


def open_calibration(folder: Path, precision: str, model_sha256: str) -> Calibration:
    """The calibration of this model for this precision in ``folder``: the record checked against what the build
    asks for. The caller verifies the files it reads with :meth:`Calibration.verify`."""
    calibration = read_calibration(folder)
    record, record_path = calibration.record, folder / RECORD
    if record.precision != precision:
        raise InvalidInput(
            f"{record_path}: calibrated for precision '{record.precision}', not '{precision}'; "
            f"run compile calibrate --precision {precision}"
        )
    if record.model_sha256 != model_sha256:
        raise InvalidInput(
            f"{record_path}: was calibrated from another model (sha256 {record.model_sha256[:12]}…, "
            f"this model is {model_sha256[:12]}…); {RERUN} on this model"
        )
    return calibration
