"""The Python API, for notebooks and scripts, in the same terms as the spec:

.. code-block:: python

    import automl

    result = automl.search("search_spaces/resnet.yaml", name="from-python")
    result = automl.search({"data": {"target": "price"}, "model": {"family": "mlp"}},
                           data=frame)                      # a pandas DataFrame
    result = automl.search(spec, data=(X, y), model=mynets.build)
    result.summary["test"], result.leaderboard, result.best_config
    model = result.load_model()                             # the winner, an nn.Module

``automl.search`` runs the same main job as ``automl search SPEC`` (a local Ray instance
unless ``address``; search, cross-validation, refit, compression, registry) and returns a
:class:`Result`. Data given as arrays or a frame are written once to a file under the
output folder (``<output>/.inputs/<sha256>.npz`` or ``.parquet``, by content), which the
spec then names, so ``automl reproduce``, ``--resume`` and nightly runs read them as they
read any data file. A model factory given as a callable is named by its import path
(``module:function``): Ray's workers import it there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automl.errors import DataError, SpecError

INPUTS = ".inputs"


@dataclass(frozen=True)
class Result:
    """A finished run, read from its run directory.

    Attributes:
        run_dir: the run directory (``summary.json``, ``best/model.pt``, ...).
    """

    run_dir: Path

    @property
    def summary(self) -> dict[str, Any]:
        """``summary.json``: the winner and why, CV, test scores, trials, wall time."""
        return json.loads((self.run_dir / "summary.json").read_text())

    @property
    def leaderboard(self):
        """The search's top trials as a ``pandas.DataFrame``: one row per trial (rank
        order), its metric(s), epochs, end and one column per sampled parameter."""
        import pandas as pd

        rows = json.loads((self.run_dir / "leaderboard.json").read_text())
        return pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"},
                              **r.get("params", {})} for r in rows])

    @property
    def best_config(self) -> dict[str, Any]:
        """The CV winner's configuration (``TrialConfig`` as a dict: ``arch``, optimizer,
        ``lr``, ``batch_size``, ``epochs``, ...)."""
        return dict(self.summary["winner"]["config"])

    def load_model(self):
        """The CV winner retrained on train + validation rows (``best/model.pt``), as an
        ``nn.Module`` in eval mode, loaded weights-only.

        Raises:
            FileNotFoundError: the run has no ``best/model.pt`` (it did not finish).
        """
        from automl.train import load_checkpoint

        return load_checkpoint(self.run_dir / "best" / "model.pt")[0]


def search(spec: str | Path | dict | Any, *, model: Any = None, data: Any = None,
           target: str | None = None, name: str | None = None, output: str | None = None,
           num_samples: int | None = None, address: str | None = None,
           dashboard_port: int = 0, console: Any = None) -> Result:
    """Run the main job ``spec`` describes (as ``automl search``) and return its
    :class:`Result`.

    Args:
        spec: a spec file's path, a dict with the spec's sections, or an
            ``automl.spec.Experiment``.
        model: a model factory, ``factory(input_shape, output_size, **hyperparameters)
            -> nn.Module``, defined at module level in an importable module (not in a
            notebook's or script's ``__main__``, which Ray's workers cannot import); it
            becomes ``model.family`` unless the spec already names it there. Its
            hyperparameters are the spec's ``model`` section keyed by its import path.
        data: ``(X, y)`` numpy arrays (``X`` ``(N, F)`` tabular, ``(N, H, W)`` or ``(N, C,
            H, W)`` images, ``(N, C, L)`` signals with ``data.kind: signal``; ``y`` ``(N,)``
            labels or values) or a ``pandas.DataFrame`` with a target column (``target``,
            else the spec's ``data.target``); None: the spec's data.
        target: the target column of a DataFrame.
        name: the run's folder name under the output folder (default: the spec's name,
            with ``-2``, ``-3``... when taken).
        output: the output folder (default: the spec's ``output.dir``).
        num_samples: overrides ``search.num_samples``.
        address: a Ray cluster to join (default: a new local instance).
        dashboard_port: the local Ray dashboard's port (0: any free port).
        console: a ``rich.console.Console`` for the progress (default: a new one; in
            Jupyter it renders in the cell, as on a terminal).

    Returns:
        The finished run's :class:`Result`.

    Raises:
        SpecError: a bad spec, a ``model`` that Ray's workers cannot import, or ``data``
            of a type it does not take (one line each, before Ray starts).
        DataError: arrays of different lengths, or data the spec's choices cannot use.
        ResourceError: trials cannot be placed, or the output folder is not writable.
        RunError: the job ran and failed.
    """
    from rich.console import Console

    from automl.nightly import run_job
    from automl.pipeline import choose_run_dir

    raw, where = _raw(spec)
    if num_samples is not None:
        raw["search"] = {**(raw.get("search") or {}), "num_samples": num_samples}
    if model is not None:
        raw["model"] = _with_model(raw.get("model") or {}, model)
    if data is not None:
        out = output or (raw.get("output") or {}).get("dir") or "runs"
        raw["data"] = _with_data(raw.get("data") or {}, data, target, Path(out))
    exp = _experiment(raw, where)
    if isinstance(spec, (str, Path)):  # a user's model module is looked for beside it
        exp._spec_dir = str(Path(spec).resolve().parent)
    elif getattr(spec, "spec_dir", None):
        exp._spec_dir = spec.spec_dir
    run_dir = choose_run_dir(exp, output, name)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    run_job(exp, run_dir, address=address, console=console or Console(),
            dashboard_port=dashboard_port)
    return Result(run_dir)


def _raw(spec: Any) -> tuple[dict, str]:
    """``spec`` as the dict of its sections (a copy) and where it came from.

    Raises:
        SpecError: a file that cannot be read as YAML, or a spec of another type.
    """
    import copy

    from automl._yaml import load_yaml
    from automl.spec import Experiment

    if isinstance(spec, Experiment):
        return spec.to_dict(), "spec"
    if isinstance(spec, (str, Path)):
        data = load_yaml(Path(spec))
        if not isinstance(data, dict):
            raise SpecError("the top level must be a mapping of sections", where=str(spec))
        return data, str(spec)
    if isinstance(spec, dict):
        return copy.deepcopy(spec), "spec"
    raise SpecError(f"expected a spec file's path, a dict or an Experiment, got "
                    f"{type(spec).__name__}", where="spec")


def _experiment(raw: dict, where: str):
    """``raw`` validated as an Experiment.

    Raises:
        SpecError: a bad spec (one line: where it came from, the key path, the fix).
    """
    from pydantic import ValidationError

    from automl.spec import Experiment
    from automl.spec._errors import first_error

    try:
        return Experiment.model_validate(raw)
    except ValidationError as e:
        message, fix = first_error(e, raw, Experiment)
        raise SpecError(message, where=where, fix=fix) from None


def _with_model(section: dict, model: Any) -> dict[str, Any]:
    """The spec's ``model`` section with ``model`` (a factory callable) as its family,
    named by its import path ``module:qualname``.

    Raises:
        SpecError: ``model`` is not callable, or is defined where Ray's workers cannot
            import it (``__main__``, a nested function, a lambda), or cannot be pickled.
    """
    if not callable(model):
        raise SpecError(f"expected a model factory (a callable), got {type(model).__name__}",
                        where="model", fix="pass a function, or name it in the spec as "
                                           "model.family: 'package.module:function'")
    module, qual = getattr(model, "__module__", None), getattr(model, "__qualname__", "")
    if not module or module == "__main__" or "<" in qual or not qual:
        where = ("a notebook's or script's __main__" if module == "__main__" else
                 "a nested function or lambda")
        raise SpecError(f"{getattr(model, '__name__', repr(model))} is defined in {where}, "
                        "which Ray's workers cannot import", where="model",
                        fix="move it to a module (e.g. mynets.py beside the notebook) and "
                            "pass it from there, or name it as 'module:function'")
    import pickle

    try:  # by reference, as Ray ships it to its workers
        pickle.dumps(model)
    except Exception as e:  # noqa: BLE001 - any pickling failure is the user's to fix
        raise SpecError(f"{qual} cannot be pickled for Ray's workers "
                        f"({type(e).__name__}: {e})", where="model",
                        fix="pass a plain module-level function or class") from None
    path = f"{module}:{qual}"
    family = section.get("family")
    named = family.get("choices", []) if isinstance(family, dict) else [family]
    return section if path in named else {**section, "family": path}


def _with_data(section: dict, data: Any, target: str | None, root: Path) -> dict[str, Any]:
    """The spec's ``data`` section naming ``data``, written to a file under
    ``root/.inputs`` (named by its content's sha256, written once).

    Raises:
        SpecError: ``data`` of another type, or a frame without a target column name.
        DataError: ``X`` and ``y`` of different lengths.
    """
    import numpy as np

    data_target = section.get("target")
    section = {k: v for k, v in section.items() if k not in ("source", "path", "target")}
    folder = root / INPUTS
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        column = target or data_target
        if not column:
            raise SpecError("a DataFrame needs the name of its target column", where="data",
                            fix="pass target='column' or set data.target in the spec")
        h = hashlib.sha256(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes())
        h.update(",".join(map(str, data.columns)).encode())
        path = folder / f"{h.hexdigest()[:16]}.parquet"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            data.to_parquet(tmp, index=False)
            tmp.replace(path)
        section.update(source="parquet", path=str(path.resolve()), target=column)
        return section
    if isinstance(data, tuple) and len(data) == 2:
        X, y = (np.asarray(a) for a in data)
        if X.dtype == object or not np.issubdtype(X.dtype, np.number) and X.dtype != bool:
            raise DataError(f"X must be numeric (got dtype {X.dtype})", where="data",
                            fix="pass numbers, or a DataFrame for text features")
        if y.dtype == object:  # labels taken from a frame: text, written without pickles
            y = y.astype(str)
        if len(X) != len(y) or y.ndim != 1:
            raise DataError(f"X has {len(X)} rows but y has shape {y.shape}; y must be 1-D "
                            "with one target per row", where="data")
        h = hashlib.sha256(np.ascontiguousarray(X).tobytes())
        h.update(str((X.shape, X.dtype)).encode())
        h.update(np.ascontiguousarray(y).tobytes())
        path = folder / f"{h.hexdigest()[:16]}.npz"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.stem}.tmp.npz")
            np.savez(tmp, X=X, y=y)
            tmp.replace(path)
        section.update(source="npz", path=str(path.resolve()), target="y")
        return section
    raise SpecError(f"expected (X, y) arrays or a pandas DataFrame, got {type(data).__name__}",
                    where="data", fix="pass data=(X, y) or data=frame with target='column'")
