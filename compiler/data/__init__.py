"""Data handling that calibration and check share: the ONNX model (and its fast skim), datasets (npz and image
folders), onnxruntime sessions and output comparison, FP16 range statistics."""
