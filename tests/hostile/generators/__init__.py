"""Generators of malformed inputs: hypothesis strategies of *recipes*, each of which writes one hostile input.

A recipe is a frozen dataclass (its repr is the case's description in a report) with a ``write`` method that
makes the input inside a case's sandbox and returns a :class:`Made`: the path to hand the CLI, a *verdict* (how a
reference reading of the documented rules classifies the input; the tests map verdicts to exit codes) and the
names an error line should mention (the file or field at fault).

Inputs are made by mutating the real files the project ships (``compiler/examples/digits_cnn.onnx``,
``compiler/examples/digits.npz``, ``profiles/digits.yaml``) and the calibration folder a session makes with
``compile calibrate``, or from scratch where the format is small (PNG/BMP headers, YAML, zip archives).

Files a case must never read or change are made under the sandbox's ``outside`` folder. Where a bug would make the
tool read one, it is a FIFO with no writer: opening it blocks, so a read shows up as a timeout, not as nothing.

The families, one module each: ``models``, ``profiles``, ``npz``, ``images``, ``calibration``, ``options``,
``releases`` (manifest values, pipeline YAML);
``common`` holds what they share. Tests use them as ``from tests.hostile import generators as g``.
"""

from tests.hostile.generators.calibration import *  # noqa: F403
from tests.hostile.generators.common import *  # noqa: F403
from tests.hostile.generators.images import *  # noqa: F403
from tests.hostile.generators.models import *  # noqa: F403
from tests.hostile.generators.npz import *  # noqa: F403
from tests.hostile.generators.options import *  # noqa: F403
from tests.hostile.generators.profiles import *  # noqa: F403
from tests.hostile.generators.releases import *  # noqa: F403
