"""What ``--fallback auto``'s first calibration leaves to the later ones (:class:`Reuse`): the Q/DQ model with some
nodes back in float is :func:`calibration.rewire.float_nodes`, which the fallback's search evaluates too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from calibration import calibrators
from calibration.rewire import float_nodes, without_orphans

if TYPE_CHECKING:
    from onnxruntime.quantization.calibrate import TensorsData


class Reuse:
    """What the first calibration of a fallback made that the later steps take as is: the pre-processed model
    (made once, not once per step) and the collected ranges. Excluding nodes only removes Q/DQ pairs, and each
    tensor's range is its own statistic of the FP32 model's values over the same samples (min/max, or its own
    histogram), so the final calibration's ranges are the first's for the tensors still quantized. So is each
    still quantized node's sensitivity: its local error is measured from FP32 activations through its own Q/DQ
    pairs, which did not change. And the final Q/DQ model is the first with the excluded nodes reading float
    values again and the Q/DQ pairs left without readers dropped, not a second run of the quantizer."""

    def __init__(self, folder: Path | None = None) -> None:
        """Its files go to ``folder`` (the caller removes it), else to a temporary folder it removes on exit."""
        import tempfile

        self.folder = folder or Path(tempfile.mkdtemp(prefix="compile-fallback-"))
        self.prepared: Path | None = None
        self.tensors: TensorsData | None = None
        self.ranked: list[dict[str, Any]] | None = None
        self.qdq: Path | None = None

    def __enter__(self) -> Reuse:
        return self

    def __exit__(self, *_: object) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)

    def prepare(self, source: Path, _work: Path | None = None) -> Path:
        if self.prepared is None:
            self.prepared = calibrators.prepare(source, self.folder)
        return self.prepared

    def keep(self, tensors: TensorsData) -> None:
        self.tensors = tensors

    def keep_model(self, qdq: Path) -> None:
        """A copy of the first Q/DQ model (one whose weights sit in a file of their own is not kept)."""
        import shutil

        if not qdq.with_name(qdq.name + ".data").exists():
            self.qdq = Path(shutil.copyfile(qdq, self.folder / "first.onnx"))

    def write_without(self, out: Path, excluded: frozenset[str]) -> bool:
        """The kept Q/DQ model with ``excluded`` nodes in float written to ``out``; False when none is kept."""
        if self.qdq is None or self.prepared is None:
            return False
        model = float_nodes(onnx.load_model(self.qdq), onnx.load_model(self.prepared), set(excluded))
        onnx.save_model(without_orphans(model), out)
        return True

    def ranking(self, qdq: Path) -> list[dict[str, Any]] | None:
        """The first calibration's sensitivity ranking of the nodes still quantized in ``qdq``, ranked again; None
        when there is none or ``qdq`` quantizes a node it did not rank."""
        if self.ranked is None:
            return None
        from calibration.sensitivity import quantized_node_names

        names = quantized_node_names(qdq)
        kept = [entry for entry in self.ranked if entry["node"] in names]
        if len(kept) != len(names):
            return None
        return [{**entry, "rank": rank} for rank, entry in enumerate(kept, 1)]

    def ranges(self, wanted: set[str]) -> TensorsData | None:
        """The kept ranges of the tensors ``wanted``, or None when some were never collected."""
        if self.tensors is None or not wanted <= set(self.tensors.data):
            return None
        from onnxruntime.quantization.calibrate import TensorsData

        return TensorsData(self.tensors.calibration_method, {name: self.tensors.data[name] for name in wanted})
