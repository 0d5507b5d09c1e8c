"""The compression's first-call imports, done ahead on a thread while the driver waits.

In the main job the compression runs in the driver, after the search and the
cross-validation, and its first steps used to pay for imports nothing earlier needed:
``torch._dynamo`` (the first optimizer's constructor imports it), ``torch.onnx`` with
``onnx`` and ONNX Runtime (the first ONNX export), ``torchao`` (the quantize stage).
Measured on this project's 2-core machine: 1.4-1.5 s in all, on the compression's critical
path. :func:`warm_up` imports them on a daemon thread while ``ray.init`` starts the local
instance (measured there: the two cores about half busy), so the chain finds them loaded.

Only imports run on the thread: no torch computation, no ``warnings.catch_warnings`` (not
thread-safe), no file. Python's per-module import locks make a later import of the same
module in the chain wait for the thread's, so the chain is correct whether or not the
thread has finished. A failed import is kept on the thread (``error``) and not raised: the
chain imports the module again and raises there, in its own stage.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

#: always: the first optimizer's constructor imports it
BASE = ("torch._dynamo",)
#: with ``compression.onnx``: the first export and ONNX Runtime session
ONNX = ("onnx", "onnxruntime", "torch.onnx")
#: with a quantize stage
QUANTIZE = ("torchao",)


def modules_for(compression) -> tuple[str, ...]:
    """The modules a spec's ``compression`` section (``automl.spec.Compression``) will
    import in its chain: :data:`BASE`, plus :data:`ONNX` when ``onnx`` is on and
    :data:`QUANTIZE` with a ``quantize`` stage; ``()`` when compression is off."""
    if not compression.enabled or not compression.stages:
        return ()
    mods = list(BASE)
    if compression.onnx:
        mods += ONNX
    if any(s.stage == "quantize" for s in compression.stages):
        mods += QUANTIZE
    return tuple(mods)


class ImportWarmer(threading.Thread):
    """A daemon thread importing ``modules`` in order (``torchao`` through
    ``automl.compress.quantize.import_torchao``, which keeps its CPU-only log lines quiet).

    Attributes:
        imported: the modules imported so far.
        error: ``"module: ExceptionType: message"`` of the first failed import, else None
            (the thread stops there).
    """

    def __init__(self, modules: Sequence[str]):
        super().__init__(name="automl-import-warmer", daemon=True)
        self.modules = tuple(modules)
        self.imported: list[str] = []
        self.error: str | None = None

    def run(self) -> None:
        for name in self.modules:
            try:
                if name == "torchao":
                    from automl.compress.quantize import import_torchao

                    import_torchao()
                else:
                    importlib.import_module(name)
            except Exception as e:  # the chain imports it again and raises in its stage
                self.error = f"{name}: {type(e).__name__}: {str(e)[:200]}"
                return
            self.imported.append(name)


def warm_up(modules: Sequence[str]) -> ImportWarmer | None:
    """Start an :class:`ImportWarmer` on ``modules`` and return it (None when empty)."""
    if not modules:
        return None
    warmer = ImportWarmer(modules)
    warmer.start()
    return warmer
