"""The sensitivity pass's in-graph error statistics agree with the same SQNR computed over whole tensors in float64
(what it fetched before), on both sides of opset 18 (axes as attribute, then as input), also for a reference whose
mean dwarfs its spread."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from calibration.sensitivity import _accumulate, _error_statistics
from compiler.data.agreement import sqnr_db


@pytest.mark.parametrize("opset", [13, 18, 19])
@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_in_graph_statistics_give_the_float64_sqnr(opset, offset):
    rng = np.random.default_rng(opset)
    dims = [None, 12, 7, 33]
    graph = helper.make_graph(
        [], "g", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, dims) for n in ("reference", "local")], []
    )
    outputs = _error_statistics(graph, "reference", "local", opset)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    runner = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sums, references, noise = [0.0, 0.0, 0.0, 0], [], []
    for batch in (3, 5):
        reference = (offset + rng.standard_normal((batch, *dims[1:]))).astype(np.float32)
        local = (reference + 0.01 * rng.standard_normal(reference.shape)).astype(np.float32)
        values = runner.run(list(outputs), {"reference": reference, "local": local})
        _accumulate(sums, *values)
        references.append(reference.astype(np.float64))
        noise.append(reference.astype(np.float64) - local)
    whole, errors = np.concatenate([r.ravel() for r in references]), np.concatenate([e.ravel() for e in noise])
    expected = sqnr_db(float(whole.sum()), float((whole * whole).sum()), float((errors * errors).sum()), whole.size)
    assert sums[3] == whole.size
    assert sqnr_db(*sums) == pytest.approx(expected, abs=0.01)
    assert 10 * np.log10(((whole - whole.mean()) ** 2).sum() / (errors**2).sum()) == pytest.approx(
        sqnr_db(*sums), abs=0.01
    )
