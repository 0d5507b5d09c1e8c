"""The user's own model: a family named by an import path, ``package.module:factory``.

The factory is called as ``factory(input_shape, output_size, **hyperparameters)`` and
returns an ``nn.Module`` mapping ``(B, *input_shape)`` to ``(B, output_size)`` logits:
``input_shape`` is one example's shape, e.g. ``(1, 8, 8)``; ``output_size`` the number of
classes (1 for regression). Its hyperparameters are the spec's section keyed by the same
import path (``model["pkg.mod:build"]``), sampled like a zoo family's.

Where the module is found: the spec's folder, then the working directory (both put in
front of ``sys.path``, as Python does with a script's folder), then the installed
packages. Before anything starts (:func:`resolve`, :func:`probe`), the module is imported,
the factory's signature is checked against the section and the factory is called once;
each problem is a one-line :class:`~automl.errors.SpecError` (exit 2). On Ray, the
package travels to the workers of every node through the job's runtime environment
(``py_modules``: :func:`ship`). A run records where the module came from, its version
and the sha256 of its source (``user_models.json``, :class:`UserModule`), so that
``automl resume``, ``compress``, ``reproduce`` and a model card's snippet import it again.

``training.init`` applies to a user's model as to the zoo's: ``default`` (the default)
leaves the factory's own initialisation untouched.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from automl.errors import SpecError, cut_list
from automl.spec import FACTORY_ARGS, is_import_path, values_of

#: the run directory's record of the user modules it imported (:func:`write_record`)
RECORD = "user_models.json"
#: how the factory is called, for messages
CALL = "factory(input_shape, output_size, **hyperparameters)"


def split(import_path: str) -> tuple[str, str]:
    """``"pkg.mod:Net.build"`` -> ``("pkg.mod", "Net.build")``."""
    module, _, attr = import_path.partition(":")
    return module, attr


def search_roots(spec_dir: str | Path | None = None) -> list[Path]:
    """The folders a user module is looked for in, first to last: the spec's folder (when
    known), then the working directory."""
    roots = [Path(spec_dir).resolve()] if spec_dir is not None else []
    cwd = Path.cwd().resolve()
    return roots + ([cwd] if cwd not in roots else [])


def add_to_path(roots: Iterable[str | Path]) -> None:
    """Put those of ``roots`` that ``sys.path`` lacks in front of it, in order."""
    for root in reversed([str(r) for r in roots if str(r) not in sys.path]):
        sys.path.insert(0, root)


def load_factory(import_path: str) -> Callable[..., Any]:
    """Import the module of ``import_path`` and return its factory (not called).

    Raises:
        ImportError: the module cannot be imported (or raised while importing); the
            message names the import path and where to put the module.
        AttributeError: the module has no such attribute.
    """
    module_name, attr = split(import_path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"{import_path}: cannot import {module_name} ({e}); "
                          "put its folder on sys.path or PYTHONPATH (the run's "
                          f"{RECORD} names it)") from e
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------- checks
def resolve(exp, spec_dir: str | Path | None = None) -> dict[str, Callable[..., Any]]:
    """Import every user family of ``exp`` (the spec's folder, ``spec_dir`` or else
    ``exp.spec_dir``, and the working directory go in front of ``sys.path``) and check
    each factory's signature against its section:
    it takes ``input_shape`` and ``output_size`` first, every hyperparameter the section
    sets, and needs none the section leaves out. Calls nothing.

    Returns:
        ``{import path: factory}``.

    Raises:
        SpecError: a module that cannot be found or raises while importing, an attribute
            that is missing or not callable, a signature without ``input_shape`` /
            ``output_size``, a hyperparameter the factory does not take, or one it needs
            that the section does not set (``where`` is the key path).
    """
    paths = exp.model.user_families()
    if not exp.user_code():
        return {}
    roots = search_roots(spec_dir if spec_dir is not None else exp.spec_dir)
    add_to_path(roots)
    found = {p: _check_signature(p, _import(p, roots), exp.model.branch(p)) for p in paths}
    for loss in [v for v in values_of(exp.training.loss) or [] if v in exp.user_code()]:
        found[loss] = _check_function(loss, _import(loss, roots, "training.loss"),
                                      ("outputs", "targets"), "training.loss")
    if exp.search.metric in exp.user_code():
        metric = exp.search.metric
        found[metric] = _check_function(metric, _import(metric, roots, "search.metric"),
                                        ("y_true", "y_pred"), "search.metric")
        if exp.search.mode is None and not isinstance(
                getattr(found[metric], "greater_is_better", None), bool):
            raise SpecError(f"{metric} does not say whether a larger value is better",
                            where="search.metric",
                            fix="give the function a greater_is_better = True or False "
                                "attribute, or set search.mode: max or min")
    return found


def metric_mode(exp) -> str | None:
    """``max`` or ``min`` for the user's own search metric (its ``greater_is_better``
    attribute, unless ``search.mode`` says), None for a metric of the task's own."""
    if not is_import_path(exp.search.metric):
        return None
    if exp.search.mode is not None:
        return exp.search.mode
    return "max" if load_factory(exp.search.metric).greater_is_better else "min"


def _check_function(import_path: str, fn: Callable[..., Any], args: tuple[str, ...],
                    where: str) -> Callable[..., Any]:
    """``fn`` must take ``len(args)`` positional arguments (``args`` name them).

    Raises:
        SpecError: it takes fewer, or needs more.
    """
    if inspect.isclass(fn):  # e.g. torch.nn:HuberLoss: calling it builds, not computes
        raise SpecError(f"{import_path} is a class; it is called as "
                        f"{split(import_path)[1]}({', '.join(args)}) on every batch",
                        where=where, fix="name a function (or wrap an instance of the class "
                                         "in one)")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trusted
        return fn
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    if (len(params) < len(args) and not varargs) or len(required) > len(args):
        raise SpecError(f"{import_path} takes ({', '.join(p.name for p in params)}); it is "
                        f"called as {split(import_path)[1]}({', '.join(args)})", where=where,
                        fix=f"define it as def {split(import_path)[1].split('.')[-1]}"
                            f"({', '.join(args)})")
    return fn


def _import(import_path: str, roots: list[Path], where: str = "model.family"
            ) -> Callable[..., Any]:
    module_name, attr = split(import_path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            looked = cut_list([*map(str, roots), "the installed packages"])
            raise SpecError(f"cannot import '{module_name}' for {import_path}: no module "
                            f"named '{e.name}' (looked in {looked})", where=where,
                            fix="put the module beside the spec or in the working "
                                "directory, or install it") from None
        raise _raised(import_path, module_name, e, where) from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        raise _raised(import_path, module_name, e, where) from None
    missing = object()
    for i, part in enumerate(attr.split(".")):
        owner, obj = obj, getattr(obj, part, missing)
        if obj is missing:
            have = sorted(n for n in dir(owner) if not n.startswith("_")
                          and callable(getattr(owner, n, None)))
            near = difflib.get_close_matches(part, have, n=1)
            name = ".".join([module_name, *attr.split(".")[:i]])
            hint = f"did you mean '{near[0]}'?" if near else \
                f"its callables: {cut_list(have)}"
            raise SpecError(f"{name} ({_file(owner)}) has no '{part}' for {import_path}",
                            where=where, fix=hint)
    if not callable(obj):
        raise SpecError(f"{import_path} is a {type(obj).__name__}, not a callable", where=where,
                        fix=f"point the import path at a function or class called as {CALL}")
    return obj


def _raised(import_path: str, module_name: str, e: BaseException,
            where: str = "model.family") -> SpecError:
    text = " ".join(str(e).split())[:200]
    return SpecError(f"importing '{module_name}' for {import_path} raised "
                     f"{type(e).__name__}: {text}", where=where,
                     fix=f"python -c 'import {module_name}' shows the traceback")


def _file(obj: Any) -> str:
    return str(getattr(obj, "__file__", None) or getattr(obj, "__name__", type(obj).__name__))


def _check_signature(import_path: str, factory: Callable[..., Any],
                     section: Mapping[str, Any]) -> Callable[..., Any]:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C extension: nothing to check
        return factory
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    first = [p.name for p in positional[:2]]
    shown = f"{import_path}{sig}"
    misplaced = [a for a in FACTORY_ARGS if a in names and a not in first]
    if (len(positional) < 2 and not var_pos) or misplaced or any(n in section for n in first):
        raise SpecError(f"{shown} does not take input_shape and output_size first",
                        where="model.family",
                        fix=f"define it as def {split(import_path)[1].split('.')[-1]}"
                            "(input_shape, output_size, ...): it is called as " + CALL)
    hyper = [p for p in params[len(positional[:2]):]
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    valid = [p.name for p in hyper]
    for key in section:
        if key not in valid and not var_kw:
            near = difflib.get_close_matches(key, valid, n=1)
            raise SpecError(f"{shown} takes no hyperparameter '{key}'",
                            where=f"model.{import_path}.{key}",
                            fix=f"did you mean '{near[0]}'?" if near else
                                f"its hyperparameters: {cut_list(valid)}; remove {key} "
                                "or add it to the factory")
    missing = [p.name for p in hyper if p.default is p.empty and p.name not in section]
    if missing:
        raise SpecError(f"{shown} needs '{missing[0]}', which has no default",
                        where=f"model.{import_path}",
                        fix=f"set model.{import_path}.{missing[0]} or give it a default")
    return factory


def probe_params(section: Mapping[str, Any]) -> dict[str, Any]:
    """One configuration of a section: each categorical's first choice, each range's low
    end, each fixed value."""
    out = {}
    for key, param in section.items():
        vals = values_of(param)
        out[key] = vals[0] if vals is not None else param.low
    return out


def probe(exp, input_shape: tuple[int, ...], output_size: int) -> list[str]:
    """Call each user factory once (:func:`probe_params`) and run its model on a batch of
    two zero examples (eval mode, no gradients), on the CPU.

    Returns:
        Lines for the data line: where each module was found, and a factory or forward
        pass that raised for this one configuration (its trials will fail with the
        traceback; the sweep goes on).

    Raises:
        SpecError: the factory returned something other than an ``nn.Module``, or its
            model's output is not ``(2, output_size)``.
    """
    import torch
    from torch import nn

    notes = []
    found = resolve(exp)  # the model factories, and a user loss or metric (not probed)
    for path in exp.model.user_families():
        factory = found[path]
        params = probe_params(exp.model.branch(path))
        shown = "{" + ", ".join(f"{k}: {v!r}" for k, v in params.items()) + "}"
        try:
            with torch.random.fork_rng(devices=[]):
                model = factory(tuple(input_shape), output_size, **params)
        except Exception as e:  # noqa: BLE001 - a trial of this configuration fails alone
            notes.append(f"{path} raised {type(e).__name__} for {shown}: {str(e)[:160]}; "
                         "trials that sample it will fail")
            continue
        if not isinstance(model, nn.Module):
            raise SpecError(f"{path} returned a {type(model).__name__}, not a "
                            f"torch.nn.Module, for {shown}", where="model.family",
                            fix="return the model the factory builds")
        x = torch.zeros(2, *input_shape)
        try:
            with torch.no_grad():
                out = model.eval()(x)
        except Exception as e:  # noqa: BLE001
            notes.append(f"{path}'s model raised {type(e).__name__} on a batch of shape "
                         f"{tuple(x.shape)} for {shown}: {str(e)[:160]}; trials that sample "
                         "it will fail")
            continue
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        if shape != (2, output_size):
            raise SpecError(f"{path}'s model maps a batch of shape {tuple(x.shape)} to "
                            f"{shape} for {shown}; it must give (2, {output_size})",
                            where="model.family",
                            fix=f"return logits of shape (batch, output_size); output_size "
                                f"is {output_size} here")
        m = describe(path)
        n = sum(p.numel() for p in model.parameters())
        notes.insert(0, f"{path} from {m.shipped or m.root} (version {m.version or '-'}, "
                        f"sha256 {m.sha256[:12]}): {n:,} parameters with {shown}")
    return notes


# --------------------------------------------------------------------------- building
def build(family: str, input_shape: tuple[int, ...], output_size: int,
          params: Mapping[str, Any]):
    """``factory(input_shape, output_size, **params)`` of the import path ``family``.

    Lazy modules (``nn.LazyLinear`` and the like) are materialised at once by one forward
    pass on a batch of two zero examples (eval mode, no gradients), so that weight
    initialisation, cost counting, checkpoints and DDP see every parameter.

    Raises:
        ImportError: the module cannot be imported (see :func:`load_factory`).
        TypeError: the factory did not return an ``nn.Module``.
        Exception: whatever the factory raises for these parameters.
    """
    import torch
    from torch import nn
    from torch.nn.modules.lazy import LazyModuleMixin

    model = load_factory(family)(tuple(input_shape), output_size, **params)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model family {family} returned a {type(model).__name__}, not a "
                        "torch.nn.Module")
    if any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()
           for m in model.modules()):
        training = model.training
        with torch.no_grad():
            model.eval()(torch.zeros(2, *input_shape))
        model.train(training)
    return model


def factory_params(family: str) -> dict[str, Any]:
    """The hyperparameters a factory takes (after the first two) and their defaults
    (``inspect.Parameter.empty`` when it has none); ``{}`` when its signature is unknown."""
    try:
        params = list(inspect.signature(load_factory(family)).parameters.values())[2:]
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                            p.KEYWORD_ONLY)}


# --------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class UserModule:
    """Where a user family's module was imported from, and what it was.

    Attributes:
        import_path: ``package.module:factory``.
        root: the ``sys.path`` folder it was imported from (absolute).
        shipped: the top-level package folder or single ``.py`` file under ``root`` that
            Ray's ``py_modules`` carries to the workers; None for an installed package
            (every node has it).
        version: ``__version__`` of the module or its top-level package, or its
            distribution's version; None when it has none.
        sha256: of its source files (each relative path and content, in sorted order): the
            package's ``.py`` files, or for an installed package the module's own file.
        files: how many source files the sha256 covers.
    """

    import_path: str
    root: str
    shipped: str | None
    version: str | None
    sha256: str
    files: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UserModule:
        return cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)})


def _installed(path: Path) -> bool:
    paths = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib")}
    return any(p and path.is_relative_to(p) for p in paths)


def describe(import_path: str) -> UserModule:
    """The :class:`UserModule` of an imported user family (its module must import)."""
    module_name = split(import_path)[0]
    top_name = module_name.split(".")[0]
    importlib.import_module(module_name)
    top, module = sys.modules[top_name], sys.modules[module_name]
    locations = list(getattr(top, "__path__", []) or [])
    if locations:
        shipped = Path(locations[0]).resolve()
        files = sorted(p for p in shipped.rglob("*.py") if "__pycache__" not in p.parts)
    else:
        shipped = Path(top.__file__).resolve()
        files = [shipped]
    root = shipped.parent
    if _installed(shipped):
        own = getattr(module, "__file__", None)
        files, ship = ([Path(own).resolve()] if own else []), None
    else:
        ship = str(shipped)
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(root)).encode() + b"\0")
        digest.update(f.read_bytes() + b"\0")
    return UserModule(import_path, str(root), ship, _version(module, top, top_name),
                      digest.hexdigest(), len(files))


def _version(module: Any, top: Any, top_name: str) -> str | None:
    for obj in (module, top):
        v = getattr(obj, "__version__", None)
        if isinstance(v, str):
            return v
    dists = importlib.metadata.packages_distributions().get(top_name) or []
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def describe_all(exp) -> dict[str, UserModule]:
    """``{import path: UserModule}`` of ``exp``'s user families (imported already)."""
    return {p: describe(p) for p in exp.user_code()}


def ship(exp) -> list[str]:
    """What Ray's runtime environment carries to the workers for ``exp``'s user families
    (``py_modules``: package folders and single-file modules); empty without any."""
    seen: list[str] = []
    for m in describe_all(exp).values():
        if m.shipped and m.shipped not in seen:
            seen.append(m.shipped)
    return seen


def write_record(run_dir: str | Path, exp) -> dict[str, Any] | None:
    """Write ``RUN_DIR/user_models.json`` for ``exp``'s user families; None (and no file)
    without any."""
    from automl._io import write_json

    if not exp.user_code():
        return None
    record = {p: m.to_dict() for p, m in describe_all(exp).items()}
    write_json(Path(run_dir) / RECORD, record)
    return record


def read_record(run_dir: str | Path) -> dict[str, UserModule]:
    """``RUN_DIR/user_models.json`` as ``{import path: UserModule}``; empty without it."""
    path = Path(run_dir) / RECORD
    if not path.is_file():
        return {}
    return {p: UserModule.from_dict(d) for p, d in json.loads(path.read_text()).items()}


def use_record(modules: Mapping[str, UserModule] | Iterable[Mapping[str, Any]]) -> list[str]:
    """Make recorded user modules importable again (their ``root`` in front of
    ``sys.path``), and say what changed since they were recorded.

    Args:
        modules: ``{import path: UserModule}`` or an iterable of ``UserModule.to_dict()``.

    Returns:
        One line per module whose source differs from the record (sha256), or that no
        longer imports.
    """
    items = list(modules.values()) if isinstance(modules, Mapping) else \
        [UserModule.from_dict(d) for d in modules]
    add_to_path([m.root for m in items if os.path.isdir(m.root)])
    changed = []
    for m in items:
        try:
            now = describe(m.import_path)
        except Exception as e:  # noqa: BLE001 - reported, and the caller's build fails
            changed.append(f"{m.import_path} does not import here ({type(e).__name__}: {e})")
            continue
        if now.sha256 != m.sha256:
            changed.append(f"{m.import_path}'s source changed since the run (sha256 "
                           f"{now.sha256[:12]} vs {m.sha256[:12]} recorded)")
    return changed
