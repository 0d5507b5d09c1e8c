"""Old import path of :mod:`automl.spec._compression`, kept so Tune snapshots pickled before
the spec became a package still load on resume."""

from automl.spec._compression import *  # noqa: F403
from automl.spec._compression import STAGE_NAMES, STAGE_SPECS, CompressionSpec  # noqa: F401
