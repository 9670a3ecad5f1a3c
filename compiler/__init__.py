"""compile: turn ONNX models into TensorRT engines and release them.

The stages are plain functions: ``compiler.inspection.inspect_model``, and the
others as they land. The CLI (``compiler.cli``) only calls them.
"""
