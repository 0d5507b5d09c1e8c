"""``automl dashboard RUN_DIR``: the run's Optuna study (``study.db``) in optuna-dashboard
on loopback, live while the sweep runs, beside the Ray dashboard's address and the job's
latest estimate of the time still to go with its range (``RUN_DIR/eta.jsonl``, written
by the job: :class:`automl._progress.EtaHistory`).

The dashboard opens ``study.db`` read-only (SQLite ``mode=ro``): it can neither write nor
upgrade the study a running sweep writes to (optuna-dashboard#545 crashed a running
study), and its short read transactions only make the sweep's writes wait (the sweep's
storage waits up to ``automl.search._tuner.STUDY_BUSY_TIMEOUT_S`` for a lock; optuna#820).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from automl._progress import ETA_FILE, latest_eta_line
from automl.errors import DataError, ResourceError

STUDY_DB = "study.db"


class _Quiet(WSGIRequestHandler):
    """No line per HTTP request on the terminal."""

    def log_message(self, format, *args):  # noqa: A002 - wsgiref's signature
        pass


def read_only_storage(run_dir: Path):
    """An Optuna ``RDBStorage`` over ``RUN_DIR/study.db`` opened read-only.

    Raises:
        DataError: there is no ``study.db`` in ``run_dir`` (not a run directory).
    """
    import optuna

    db = Path(run_dir) / STUDY_DB
    if not db.is_file():
        raise DataError("no study.db here, so there is no study to show", where=str(db),
                        fix="pass the run directory an `automl search` writes (runs/<name>)")
    url = f"sqlite:///file:{db.resolve()}?mode=ro&uri=true"
    return optuna.storages.RDBStorage(url, skip_compatibility_check=True,
                                      engine_kwargs={"connect_args": {"timeout": 30}})


def ray_dashboard_url(run_dir: Path) -> str | None:
    """The Ray dashboard of the Ray instance the run's driver started and still holds
    (``RUN_DIR/ray.json``), or None when it has stopped or the run joined a cluster."""
    try:
        rec = json.loads((Path(run_dir) / "ray.json").read_text())
    except (OSError, ValueError):
        return None
    return rec.get("dashboard_url") or None


def eta_line(run_dir: Path, now: float | None = None) -> str:
    """The run's latest estimate as printed by ``automl dashboard``: ``sweep 12/40  eta 40s
    (30-70s), 3s ago`` (the stage, its steps done, the ETA and its 80% range, and how old
    it is; ``now``: Unix seconds), or a line saying there is none yet."""
    return latest_eta_line(Path(run_dir) / ETA_FILE, now) or \
        "none yet (the job writes one as each trial or step ends)"


@dataclass
class Dashboard:
    """A running optuna-dashboard server (:func:`start`); ``url`` is its address."""

    server: WSGIServer
    thread: threading.Thread
    url: str

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def start(run_dir: Path, host: str = "127.0.0.1", port: int = 8080) -> Dashboard:
    """Serve ``RUN_DIR/study.db`` in optuna-dashboard (``optuna_dashboard.wsgi``, the
    library's own app) from a background thread on ``host:port`` (0: any free port).

    Raises:
        DataError: ``run_dir`` has no ``study.db``.
        ResourceError: the port cannot be bound.
    """
    from optuna_dashboard import wsgi

    app = wsgi(read_only_storage(run_dir))
    try:
        server = make_server(host, port, app, handler_class=_Quiet)
    except OSError as e:
        raise ResourceError(f"cannot listen on {host}:{port}: {e.strerror}", where="--port",
                            fix="pass another --port (0 picks a free one)") from None
    thread = threading.Thread(target=server.serve_forever, name="optuna-dashboard",
                              daemon=True)
    thread.start()
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return Dashboard(server, thread, f"http://{shown}:{server.server_port}/dashboard/")
