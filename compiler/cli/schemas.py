"""The JSON Schemas of every record a stage writes and every ``--json`` output, generated from the pydantic models
that write and read them, and shipped in the package (``compiler/schemas/``) for tools that consume them.

    python -m compiler.cli.schemas compiler/schemas   # after changing a record or an output (a test holds them equal)

Every document carries ``format_version``: records their own (a reader refuses one it does not know), outputs
:data:`compiler.cli.render.OUTPUT_FORMAT`. What may change between versions is said in docs/formats.md.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

RECORDS = {
    "engine.json": "compiler.core.records:EngineRecord",
    "layers.json": "compiler.core.records:LayersRecord",
    "build.json": "compiler.core.records:BuildReport",
    "calibration.json": "compiler.core.records:CalibrationRecord",
    "report.json": "compiler.core.records:AccuracyReport",
    "check.json": "compiler.core.records:CheckReport",
    "manifest.json": "compiler.core.records:ReleaseManifest",
    "channel.json": "compiler.core.records:ChannelRecord",
    "yank.json": "compiler.core.records:YankRecord",
}
"""The files stages write and later stages (or consumers of a store) read."""
OUTPUTS = {
    "doctor": "compiler.inspect.doctor:DoctorReport",
    "skus": "compiler.inspect.skus:SkuListing",
    "inspect": "compiler.inspect.summary:InspectReport",
    "calibrate": "compiler.core.records:CalibrationResult",
    "build": "compiler.core.records:BuildReport",
    "check": "compiler.core.records:CheckReport",
    "publish": "compiler.releases.publish:PublishResult",
    "pull": "compiler.releases.pull:PullResult",
    "ls": "compiler.releases.listing:Listing",
    "promote": "compiler.releases.channels:PromoteResult",
    "yank": "compiler.releases.yank:YankResult",
    "gc": "compiler.releases.store_gc:GcReport",
    "verify": "compiler.releases.verify:VerifyResult",
    "export-triton": "compiler.export.triton:TritonExport",
    "export-rtx": "compiler.export.rtx:RtxExport",
    "release": "compiler.pipeline.report:ReleaseReport",
}
"""What each command's ``--json`` prints (``compile ls NAME@VERSION`` and ``provenance`` print the manifest and an
in-toto statement, formats of their own)."""


def _model(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a record (``engine.json``…) or of a command's ``--json`` output (``doctor``…)."""
    from compiler.cli.render import OUTPUT_FORMAT

    path = RECORDS.get(name) or OUTPUTS[name]
    generated = _model(path).model_json_schema(mode="serialization")
    generated["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    generated["$id"] = f"https://trt-compile.github.io/schemas/{file_name(name)}"
    properties = generated.setdefault("properties", {})
    if name in OUTPUTS and "format_version" not in properties:
        properties["format_version"] = {"const": OUTPUT_FORMAT, "type": "integer", "title": "Format Version"}
        generated["required"] = ["format_version", *generated.get("required", [])]
    return generated


def file_name(name: str) -> str:
    """``engine.schema.json`` for a record, ``doctor-output.schema.json`` for a command's output."""
    return f"{name.removesuffix('.json')}.schema.json" if name in RECORDS else f"{name}-output.schema.json"


def rendered() -> dict[str, str]:
    """File name -> the schema's text, as committed under compiler/schemas/."""
    return {file_name(name): json.dumps(schema(name), indent=2, sort_keys=True) + "\n" for name in [*RECORDS, *OUTPUTS]}


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (out / name).write_text(text)


if __name__ == "__main__":
    main(sys.argv[1])
