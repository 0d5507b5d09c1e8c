"""Mend Tune's experiment snapshot before ``Tuner.restore`` reads it.

Each ``Tuner.fit`` is a driver *session* (``<session>`` = its start time). Tune saves the
session's snapshot (``experiment_state-<session>.json``, ``search_gen_state-<session>.json``,
``searcher-state-<session>.pkl``, optionally ``callback-states-<session>.pkl``) into the
driver's staging folder (``<ray temp>/session_*/artifacts/<stamp>/<experiment>/driver_artifacts``)
and then *copies* the files into the experiment folder, in parallel and without a rename
(``ray.train._internal.storage._upload_to_fs_path``). A driver killed mid-copy leaves a torn
file (``Tuner.restore`` fails with ``EOFError: Ran out of input``, then Tune restarts the
experiment) or a mix of two saves (a search generator that counts fewer trials than the
experiment holds starts more trials than requested).

:func:`mend_snapshots` checks the newest session, the one Tune restores, and if it is torn,
incomplete or inconsistent:

1. puts back the session's files from the killed driver's staging folder when that copy is
   whole and consistent (Ray keeps old session folders on the machine that ran the driver);
2. else, if a file is torn or missing, sets aside every file of the session (renamed
   ``<name>.unreadable``; nothing is deleted) so that Tune restores the session before,
   whole and consistent; trials since then run again from their checkpoints;
3. else, if the files are whole but from two saves, keeps them and says so;
4. else, if a file does not load with Tune's unpickler (another version wrote it), stops with
   a one-line error: Tune itself would log it and *restart the experiment* over the old one.

Only local experiment folders are mended: object stores (``s3://``) write whole objects.
"""

from __future__ import annotations

import itertools
import json
import os
import pickletools
import re
import shutil
from pathlib import Path

from automl.errors import RunError

#: Tune's snapshot files (``ray.tune`` ``CKPT_FILE_TMPL``s); the first three make a session.
SNAPSHOT = re.compile(r"^(?P<kind>experiment_state|search_gen_state|searcher-state|callback-states)"
                      r"-(?P<session>.+)\.(json|pkl)$")
REQUIRED = ("experiment_state", "search_gen_state", "searcher-state")
UNREADABLE = ".unreadable"


def readable(path: Path) -> bool:
    """Whether a snapshot file is whole: ``experiment_state-*.json`` parses as JSON; the others
    are cloudpickles, checked opcode by opcode up to their STOP (nothing is unpickled)."""
    try:
        if path.name.startswith("experiment_state-"):
            json.loads(path.read_text())
        else:
            with path.open("rb") as f:
                for _ in pickletools.genops(f):
                    pass
        return True
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def _load(path: Path):
    """The snapshot file as Tune loads it (JSON, else Ray's cloudpickle); raises what it raises."""
    if path.name.startswith("experiment_state-"):
        return json.loads(path.read_text())
    import ray.cloudpickle as cloudpickle

    return cloudpickle.loads(path.read_bytes())


def _mismatch(states: dict) -> str | None:
    """Why loaded snapshot files come from different saves, or None: the search generator
    must count as many trials as the experiment state holds, and the searcher must have
    asked for as many (``OptunaSearch._ot_trials``)."""

    def size(state, key):  # an int, the length of a collection, or None when absent
        value = state.get(key) if isinstance(state, dict) else None
        return value if isinstance(value, int) or value is None else len(value)

    trials = size(states["experiment_state"], "trial_data")
    counter = size(states["search_gen_state"], "counter")
    asked = size(states["searcher-state"], "_ot_trials")  # None for another searcher
    if len({n for n in (trials, counter, asked) if n is not None}) <= 1:
        return None
    return f"{trials} trials, search generator counted {counter}, searcher asked {asked}"


def staging_roots() -> list[Path]:
    """Folders that hold Ray's ``session_*`` folders on this machine: the running session's
    parent (``ray.init(_temp_dir=...)``) and Ray's default (``$RAY_TMPDIR``, ``$TMPDIR`` or
    ``/tmp``, plus ``/ray``)."""
    roots: list[Path] = []
    try:
        import ray
        from ray._common.utils import get_default_system_temp_dir

        roots.append(Path(get_default_system_temp_dir()) / "ray")
        node = ray._private.worker._global_node
        if node is not None:
            roots.insert(0, Path(node.get_session_dir_path()).parent)
    except Exception:  # noqa: BLE001 - a Ray without these helpers: fall back to /tmp/ray
        roots.append(Path("/tmp/ray"))
    return list(dict.fromkeys(roots))


def _files(folder: Path, session: str) -> dict[str, Path]:
    """``kind -> path`` of ``session``'s snapshot files in ``folder``."""
    return {m["kind"]: folder / m.string for p in folder.iterdir()
            if (m := SNAPSHOT.match(p.name)) and m["session"] == session}


def _staging_folders(experiment_dir: Path, session: str, roots: list[Path]) -> list[Path]:
    """Staging folders holding ``session``'s files of *this* experiment, newest first: their
    whole ``search_gen_state`` names ``experiment_dir`` (session strings are timestamps, so
    another run started in the same second has the same file names)."""
    gen = f"search_gen_state-{session}.json"
    marker = str(experiment_dir).encode()
    found = [p for root in roots
             for p in root.glob(f"session_*/artifacts/*/{experiment_dir.name}/driver_artifacts/{gen}")]
    mine = [p for p in found if readable(p) and marker in p.read_bytes()]
    return [p.parent for p in sorted(mine, key=lambda p: p.stat().st_mtime, reverse=True)]


TORN, UNLOADABLE, MIXED = "torn", "unloadable", "mixed"


def _choose(exp_dir: Path, session: str, roots: list[Path]
            ) -> tuple[dict[str, Path] | None, str | None, str]:
    """Pick, per kind, one whole and loadable version of ``session``'s files (the run
    directory's first, then staging copies, newest first) such that all come from one save:
    sound files are left as they are, and only what is torn or from another save is replaced.

    Returns:
        ``(picks, problem, why)``: ``picks`` (kind -> path) is None when no such set exists;
        ``problem`` is what is wrong with the run directory's files (``TORN`` when a file is
        torn or missing, else ``UNLOADABLE``, else ``MIXED``; None when they are sound) and
        ``why`` says it in words.
    """
    stored = _files(exp_dir, session)
    kinds = [*REQUIRED, *(k for k in stored if k not in REQUIRED)]
    options: dict[str, list[tuple[Path, object]]] = {k: [] for k in kinds}
    torn = [f"{k} missing" for k in REQUIRED if k not in stored]
    errors: list[str] = []

    def add(kind: str, path: Path) -> None:  # a whole, loadable version of ``kind``
        mine = path.parent == exp_dir  # a staging copy that is torn or does not load is skipped
        if not readable(path):
            if mine:
                torn.append(path.name)
            return
        try:
            options[kind].append((path, _load(path)))
        except Exception as e:  # noqa: BLE001 - another version's classes, any unpickling error
            if mine:
                errors.append(f"{path.name} cannot be loaded ({type(e).__name__}: {str(e)[:160]})")

    for kind, path in stored.items():
        add(kind, path)
    if torn:
        problem, why = TORN, "; ".join([f"torn: {', '.join(torn)}", *errors])
    elif errors:
        problem, why = UNLOADABLE, "; ".join(errors)
    else:
        mismatch = _mismatch({k: options[k][0][1] for k in REQUIRED})
        if mismatch is None:
            return dict(stored), None, ""
        problem, why = MIXED, f"from two saves ({mismatch})"
    for folder in _staging_folders(exp_dir, session, roots):
        for kind, path in _files(folder, session).items():
            if kind in options:
                add(kind, path)
    for combo in itertools.product(*(options[k] for k in kinds)):
        picks = dict(zip(kinds, combo))
        if _mismatch({k: state for k, (_, state) in picks.items()}) is None:
            return {k: path for k, (path, _) in picks.items()}, problem, why
    return None, problem, why


def mend_snapshots(experiment_dir: str | Path, roots: list[Path] | None = None) -> list[str]:
    """Make the snapshot Tune will restore from ``experiment_dir`` whole (see module doc).

    Args:
        experiment_dir: the Tune experiment folder (``<run dir>/tune``); a URI is left alone.
        roots: where to look for Ray's session folders; :func:`staging_roots` when None.

    Returns:
        One line per action taken, for the console (empty when the newest session is sound).

    Raises:
        RunError: every session's snapshot is torn and none has a staging copy; or the
            newest session's files do not load (another automl or Ray version wrote them):
            Tune would log "Failed to restore the run state" and restart the experiment.
    """
    if "://" in str(experiment_dir) or not Path(experiment_dir).is_dir():
        return []
    exp_dir = Path(experiment_dir).resolve()
    sessions = {m["session"] for p in exp_dir.iterdir() if (m := SNAPSHOT.match(p.name))}
    if not sessions:
        return []
    roots = roots if roots is not None else staging_roots()
    actions: list[str] = []
    for session in sorted(sessions, reverse=True):  # Tune restores the newest
        picks, problem, why = _choose(exp_dir, session, roots)
        if picks is not None:
            put_back = [p for p in picks.values() if p.parent != exp_dir]
            for path in put_back:
                tmp = exp_dir / f".{path.name}.mend"
                shutil.copyfile(path, tmp)
                os.replace(tmp, exp_dir / path.name)
            if put_back:
                froms = sorted({str(p.parent) for p in put_back})
                actions.append(f"snapshot of session {session} was {why} "
                               "(driver killed while Tune copied it); put back "
                               f"{', '.join(p.name for p in put_back)} from {', '.join(froms)}")
            return actions
        if problem == UNLOADABLE:  # Tune would log it and restart the experiment
            raise RunError(f"Tune's snapshot {why}", where=str(exp_dir),
                           fix="resume with the automl and Ray versions that wrote it, or "
                           "start a new run (without --resume)")
        if problem == MIXED:
            actions.append(f"snapshot of session {session} is {why} and has no staging copy "
                           "from one save; restoring it as it is")
            return actions
        for path in _files(exp_dir, session).values():
            path.rename(path.with_name(path.name + UNREADABLE))
        actions.append(f"snapshot of session {session} was {why} and has no whole staging "
                       f"copy; set aside as *{UNREADABLE}, restoring the session before it")
    raise RunError(f"every Tune snapshot was torn when the driver was killed (set aside as "
                   f"*{UNREADABLE})", where=str(exp_dir),
                   fix="start a new run (without --resume); finished trials are in "
                   "trials.jsonl and study.db")
