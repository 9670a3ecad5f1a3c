"""`compile inspect` and `compile doctor`: what a model is (summary, TensorRT partitions, unsupported nodes,
profile validation) and what this machine has (backends, GPUs, onnxruntime providers).

Modules: ``summary`` (the model), ``doctor`` (the machine).
"""
