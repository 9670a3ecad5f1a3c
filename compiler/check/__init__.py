"""`compile check`: fusions, partition boundaries, memory fit, accuracy, FP16 range and lint of a build folder,
as gates with thresholds and evidence (docs/check.md).

One module per check (``fusions``, ``partitions``, ``memory``, ``accuracy``, ``lint``; the FP16 range statistics
are ``compiler.data.ranges``, shared with calibration), ``checks`` runs them over the folder that
``compiler.engines.folder`` reads, ``report`` writes check.json and check.md, ``memo`` answers a check asked again
with nothing changed.
"""

from compiler.check.memo import check

__all__ = ["check"]
