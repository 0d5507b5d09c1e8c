"""A local, file-based model registry: named models, numbered versions, aliases, lineage.

Layout under the registry folder (``registry.dir``, default ``<output.dir>/registry``)::

    <name>/aliases.json     {"champion": {"version": 2, "set_at": "2026-...Z"}, ...}
    <name>/.lock            serialises version numbering and alias changes (filelock)
    <name>/<n>/version.json name, version, created_at, format, files (sha256), lineage,
                            tracking
    <name>/<n>/model.pt     the weights (``automl.checkpoint/1``) with ``model.ts`` and
                            ``model.onnx`` when they could be exported; ``NAME.pt/.json``
                            (``.ts``, ``.onnx``) for a compressed export (``automl.export/1``);
                            ``NAME.onnx`` alone for ONNX Runtime's int8 (``automl.onnx/1``)
    <name>/<n>/MODEL_CARD.md the model card (``automl.card``): data, search, scores, size,
                            lineage and a loading snippet that runs

A version folder is built in a hidden staging folder and renamed into place, so it
appears whole or not at all; JSON files are replaced atomically. References are
``NAME`` (latest version), ``NAME@3``, ``NAME@latest`` or ``NAME@<alias>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock

from automl._io import UMASK, write_json
from automl.errors import RegistryError, cut_list

CHECKPOINT = "automl.checkpoint/1"
DEFAULT_REGISTRY = "runs/registry"  # the CLI's --dir default: <output.dir>/registry of the default
EXPORT = "automl.export/1"
ONNX = "automl.onnx/1"
CARD = "MODEL_CARD.md"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def now() -> str:
    """UTC time as ISO 8601 with a ``Z``, to the second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_name(name: str, what: str = "model name") -> str:
    """``name`` if it is a plain name (letters, digits, ``_ . -``; no ``..``, no ``/``).

    Raises:
        RegistryError: otherwise.
    """
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise RegistryError(f"invalid {what} {name!r}", where=str(name),
                            fix="use letters, digits, '_', '.', '-' (no '..' or '/')")
    return name


@dataclass(frozen=True)
class ModelVersion:
    """One registered version. ``files`` maps file name -> sha256; ``lineage`` holds the
    spec hash, data checksum, trial id, CV scores, compression chain, parent version and
    timestamps; ``tracking`` where its W&B run and artifact are (or None)."""

    name: str
    version: int
    path: Path
    created_at: str
    format: str
    files: dict[str, str]
    lineage: dict[str, Any]
    tracking: dict[str, Any] | None = None
    aliases: tuple[str, ...] = field(default=())
    #: set by ``Registry.register`` when the files equal an existing version's, which it
    #: returned instead of registering them again (not part of ``to_dict``)
    unchanged: bool = field(default=False, compare=False)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def card(self) -> Path | None:
        """The version's model card (``MODEL_CARD.md``), or None when it has none."""
        path = self.path / CARD
        return path if CARD in self.files and path.is_file() else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["unchanged"]
        out["path"], out["aliases"] = str(self.path), list(self.aliases)
        out["card"] = str(self.card) if self.card else None
        return out


#: what the model behind each kind of version trained on, for versions whose lineage does
#: not say (``lineage["test"]["trained_on"]``, recorded since issue 45)
TRAINED_ON = {"winner": "train + validation rows (refit)",
              "compressed": "train rows (compressed from the chain's teacher)",
              "onnx-int8": "train rows (compressed from the chain's teacher)",
              "pareto_member": "train rows (sweep checkpoint)"}


def test_figure(version: ModelVersion) -> dict[str, Any]:
    """A version's test accuracy and what it was measured on: ``{"accuracy": float or
    None, "split": "test", "trained_on": what its model trained on, "teacher_accuracy":
    the chain teacher's test accuracy (compressed models; None otherwise or when not
    recorded)}``.

    Every figure is on the run's test split, but the models behind them trained on
    different rows: the winner's refit on train + validation rows, a compressed model
    (and its teacher) on the train rows only. A compressed model compares with its
    teacher, not with the winner.
    """
    t = version.lineage.get("test") or {}
    kind = version.lineage.get("kind")
    trained = t.get("trained_on") or TRAINED_ON.get(kind) or version.lineage.get("weights")
    acc, teacher = t.get("accuracy"), t.get("teacher_accuracy")
    return {"accuracy": float(acc) if isinstance(acc, (int, float)) else None, "split": "test",
            "trained_on": trained or "-",
            "teacher_accuracy": float(teacher) if isinstance(teacher, (int, float)) else None}


class Registry:
    """The registry rooted at ``root`` (created on first registration)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    # ------------------------------------------------------------------ reading
    def names(self) -> list[str]:
        """Registered model names, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and _NAME.match(p.name) and self._numbers(p.name))

    def _numbers(self, name: str) -> list[int]:
        folder = self.root / name
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir()
                      if p.name.isdigit() and (p / "version.json").is_file())

    def aliases(self, name: str) -> dict[str, dict[str, Any]]:
        """``{alias: {"version": n, "set_at": iso time}}`` of model ``name``."""
        path = self.root / check_name(name) / "aliases.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _read(self, name: str, number: int) -> ModelVersion:
        folder = self.root / name / str(number)
        data = json.loads((folder / "version.json").read_text())
        tags = tuple(sorted(a for a, v in self.aliases(name).items() if v["version"] == number))
        return ModelVersion(name, number, folder, data["created_at"], data["format"],
                            data["files"], data["lineage"], data.get("tracking"), tags)

    def versions(self, name: str) -> list[ModelVersion]:
        """Every version of ``name``, oldest first. Raises RegistryError if there is none."""
        numbers = self._numbers(check_name(name))
        if not numbers:
            known = cut_list(self.names())
            raise RegistryError(f"no model named {name!r} (registered: {known})",
                                where=str(self.root), fix="see `automl registry list`")
        return [self._read(name, n) for n in numbers]

    def get(self, ref: str) -> ModelVersion:
        """The version ``ref`` names (``NAME``, ``NAME@3``, ``NAME@latest``, ``NAME@alias``).

        Raises:
            RegistryError: malformed reference, unknown name, version or alias.
        """
        name, _, tag = ref.partition("@")
        versions = self.versions(name)
        if not tag or tag == "latest":
            return versions[-1]
        if tag.isdigit():
            hit = [v for v in versions if v.version == int(tag)]
            if not hit:
                last = versions[-1].version
                raise RegistryError(f"{name} has no version {tag} (versions 1..{last})",
                                    where=ref)
            return hit[0]
        entry = self.aliases(name).get(tag)
        if entry is None:
            known = cut_list(sorted(self.aliases(name)))
            raise RegistryError(f"{name} has no alias {tag!r} (aliases: {known})", where=ref,
                                fix="use NAME@VERSION or promote a version first")
        return self._read(name, int(entry["version"]))

    # ------------------------------------------------------------------ writing
    def _lock(self, name: str) -> FileLock:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(folder / ".lock"), timeout=60)

    def same_content(self, name: str, digests: Mapping[str, str]) -> ModelVersion | None:
        """The oldest version of ``name`` whose files (the model card aside: it carries the
        registration time) are exactly ``digests`` (file name -> sha256), or None."""
        for number in self._numbers(check_name(name)):
            version = self._read(name, number)
            if {k: v for k, v in version.files.items() if k != CARD} == dict(digests):
                return version
        return None

    def register(self, name: str, files: Mapping[str, str | Path], *, format: str,
                 lineage: dict[str, Any], tracking: dict[str, Any] | None = None,
                 card: Callable[[str, int, Path], str] | None = None) -> ModelVersion:
        """Copy ``files`` (target file name -> source path) into a new version of ``name``,
        unless a version of ``name`` already holds the same files (same names, same
        sha256): then that version is returned, with ``unchanged`` set, and nothing is
        written (registration is idempotent by content, so re-running ``automl compress``
        on the same run registers nothing new).

        ``lineage`` gets ``registered_at``. Version numbers start at 1 and never repeat.
        ``card(name, version, final version folder)`` returns the Markdown written as
        ``MODEL_CARD.md`` into the version (hashed like the other files).

        Raises:
            RegistryError: a bad name or target file name, or a source file is missing.
        """
        check_name(name)
        for target, src in files.items():
            check_name(target, "file name")
            if not Path(src).is_file():
                raise RegistryError(f"cannot register {name}: {src} does not exist",
                                    where=str(src))
        digests = {t: sha256_file(Path(src)) for t, src in files.items()}
        with self._lock(name):
            same = self.same_content(name, digests)
            if same is not None:
                return dataclasses.replace(same, unchanged=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root / name))
            try:
                staging.chmod(0o777 & ~UMASK)  # mkdtemp makes it private (0700)
                for target, src in files.items():
                    shutil.copyfile(src, staging / target)
                number = (self._numbers(name) or [0])[-1] + 1
                names = list(files)
                if card is not None:
                    (staging / CARD).write_text(card(name, number, self.root / name / str(number)))
                    names.append(CARD)
                record = {"name": name, "version": number, "created_at": now(),
                          "format": format,
                          "files": {t: digests.get(t) or sha256_file(staging / t)
                                    for t in names},
                          "lineage": {**lineage, "registered_at": now()},
                          "tracking": tracking}
                write_json(staging / "version.json", record)
                os.rename(staging, self.root / name / str(number))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return self._read(name, number)

    def set_alias(self, ref: str, alias: str) -> ModelVersion:
        """Point ``alias`` (e.g. ``champion``) at the version ``ref`` names, moving it from
        any other version of that model.

        Raises:
            RegistryError: bad alias (must start with a letter; ``latest`` is reserved)
                or unknown reference.
        """
        if not _ALIAS.match(alias or "") or alias == "latest":
            raise RegistryError(f"invalid alias {alias!r}", where=ref,
                                fix="start with a letter; use letters, digits, '_', '.', '-'; "
                                    "'latest' is reserved")
        version = self.get(ref)
        with self._lock(version.name):
            table = self.aliases(version.name)
            table[alias] = {"version": version.version, "set_at": now()}
            write_json(self.root / version.name / "aliases.json", table)
        return self._read(version.name, version.version)

    # ------------------------------------------------------------------ loading
    def load(self, ref: str):
        """Rebuild the model ``ref`` names from its recorded config and load its weights
        with ``torch.load(weights_only=True)``, after checking each file's sha256.

        A user's own model (lineage ``user_models``) is built by its factory, imported from
        the folder the run imported it from.

        Returns:
            ``(model in eval mode, ModelVersion)``; for an ONNX-only version the model is an
            ``automl.compress.onnx_export.OnnxModel`` (ONNX Runtime, tensor in, logits out).

        Raises:
            RegistryError: unknown reference, a file changed since registration, a file
                that needs more than weights-only unpickling, or an unknown format.
        """
        version = self.get(ref)
        if version.lineage.get("user_models"):  # a user's model: import its recorded code
            from automl.models.user import use_record

            use_record(version.lineage["user_models"])
        for fname, digest in version.files.items():
            path = version.path / fname
            if not path.is_file() or sha256_file(path) != digest:
                raise RegistryError(f"{fname} is missing or changed since registration "
                                    "(sha256 mismatch)", where=str(path),
                                    fix="register the model again")
        if version.format == CHECKPOINT:
            from automl.train import load_checkpoint

            try:
                model, _ = load_checkpoint(version.path / "model.pt")
            except (pickle.UnpicklingError, ValueError, RuntimeError) as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise RegistryError(f"refused to load: {first}", where=str(version.path),
                                    fix="register a checkpoint that holds only weights and "
                                        "plain data") from None
            return model, version
        if version.format == EXPORT:
            from automl.compress.export import load_model

            model = load_model(version.path, version.lineage["export_name"])
            return model.eval(), version
        if version.format == ONNX:
            from automl.compress.onnx_export import OnnxModel

            return OnnxModel(version.path / f"{version.lineage['export_name']}.onnx"), version
        raise RegistryError(f"unknown model format {version.format!r}", where=str(version.path))
