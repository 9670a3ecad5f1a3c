"""Baseline for benchmarks/build.py: the TensorRT-RTX builder API called directly, nothing else.

Same builder settings as `compile build`: one optimization profile set, the target compute
capability, DETAILED profiling verbosity; the plan is written to disk.
usage: raw_build.py MODEL PROFILES.yaml COMPUTE_CAPABILITY OUT.plan
"""

import sys

import tensorrt_rtx as trt
import yaml


def raw_build(model: str, profiles: str, capability: str, out: str) -> None:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(model):
        raise SystemExit(str(parser.get_error(0)))
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    with open(profiles) as handle:
        entries = yaml.safe_load(handle)["profiles"]
    for entry in entries:
        profile = builder.create_optimization_profile()
        for name, shape in entry["shapes"].items():
            profile.set_shape(name, shape["min"], shape["opt"], shape["max"])
        config.add_optimization_profile(profile)
    config.num_compute_capabilities = 1
    config.set_compute_capability(getattr(trt.ComputeCapability, "SM" + capability.replace(".", "")), 0)
    plan = builder.build_serialized_network(network, config)
    with open(out, "wb") as handle:
        handle.write(plan)


if __name__ == "__main__":
    raw_build(*sys.argv[1:])
