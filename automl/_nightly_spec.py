"""Old import path of :mod:`automl.spec._nightly`, kept so Tune snapshots pickled before the
spec became a package still load on resume."""

from automl.spec._nightly import *  # noqa: F403
from automl.spec._nightly import NightlySpec  # noqa: F401
