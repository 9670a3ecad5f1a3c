"""Stand-ins for what cannot be made here: datacenter TensorRT builds only on a GPU of the target SKU.

``datacenter_copy`` turns a real TensorRT-RTX build folder (checked with --data, so it has golden inputs) into the
folder a datacenter TensorRT build of the same model would be: the same records, each engine.json naming
datacenter TensorRT, and opaque plan bytes (not a loadable plan: nothing here can make or load one). Export,
publish and pull treat a plan as bytes with a digest, so the repository layout, the runtime rule, staging,
config.pbtxt and warmup run for real on it; whether Triton loads the plan is what it cannot show.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path


def datacenter_copy(build: Path, out: Path, version: str = "10.11.0.33", version_compatible: bool = False) -> Path:
    shutil.copytree(build, out)
    digests = {}
    for record in sorted(out.glob("*/*/engine.json")):
        engine = json.loads(record.read_text())
        plan = record.with_name("engine.plan")
        data = f"datacenter TensorRT {version} plan stand-in for {engine['sku']}/{engine['precision']}\n".encode()
        data += plan.read_bytes()[64:]
        plan.write_bytes(data)
        engine.update(
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            plan_header=None,
            backend={"name": "tensorrt", "version": version},
            builder_options={**engine["builder_options"], "version_compatible": version_compatible},
        )
        record.write_text(json.dumps(engine, indent=2))
        digests[(engine["sku"], engine["precision"])] = engine["sha256"]
    check = out / "check.json"
    if check.exists():
        report = json.loads(check.read_text())
        for engine in report["engines"]:
            engine["engine_sha256"] = digests.get((engine["sku"], engine["precision"]), engine["engine_sha256"])
        check.write_text(json.dumps(report, indent=2))
    return out
