"""Ctrl-C (SIGINT) during a job, as users of Optuna, W&B and Ray Tune expect it.

The first Ctrl-C stops the job within seconds: :class:`JobInterrupts` sets the process's
interrupt flag and raises :class:`KeyboardInterrupt` in the main thread, so every stage
unwinds through its ``finally`` blocks (the ledger is flushed, running trials stay
RUNNING in ``study.db`` and resumable, Ray is stopped) and nothing after it runs: no
registry version, no W&B winner. A stage that returns while the flag is set (a library
swallowed the interrupt, or the stage ran on a thread) does not count as finished
(:func:`check`). The second Ctrl-C stops at once: the Ray processes this driver started
are killed and the process exits with 130 (``--resume`` picks the run up from its run
directory, as after a crash).

Ray Tune installs its own SIGINT handler in ``tune.run`` (it ends the sweep as if it had
finished, prints ``Tuner.restore(...)`` and keeps the handler after the sweep, so a
Ctrl-C during cross-validation was swallowed); :func:`no_tune_handler` turns it off
around a sweep with Tune's public switch ``TUNE_DISABLE_SIGINT_HANDLER``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from automl.errors import EXIT_INTERRUPTED

_FLAG = threading.Event()


def interrupted() -> bool:
    """Whether a Ctrl-C reached this job (set by :class:`JobInterrupts`)."""
    return _FLAG.is_set()


def mark() -> None:
    """Set the interrupt flag: a :class:`KeyboardInterrupt` is unwinding the job (one that
    no handler of ours saw, e.g. in a notebook), so threads that wait (:func:`check`) stop
    too."""
    _FLAG.set()


def clear() -> None:
    """Clear the interrupt flag (a new job starts)."""
    _FLAG.clear()


def check() -> None:
    """Raise :class:`KeyboardInterrupt` when the job was interrupted.

    Called where work that may have swallowed the interrupt returns (a stage's end) and by
    waits on other threads (the refit beside the compression), which no signal reaches.

    Raises:
        KeyboardInterrupt: a Ctrl-C reached the job.
    """
    if _FLAG.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def no_tune_handler() -> Iterator[None]:
    """Ray Tune's SIGINT handler off while the block runs (``TUNE_DISABLE_SIGINT_HANDLER``,
    read by ``tune.run``), so a Ctrl-C in the sweep raises :class:`KeyboardInterrupt`
    instead of ending the sweep as if it had finished."""
    before = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = before


def kill_children() -> int:
    """SIGKILL every process this one started (the local Ray instance: raylet, GCS,
    dashboard, workers), children of children included; returns how many."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for p in kids:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return len(kids)


def leave() -> None:
    """End an interrupted job's process: what it started is killed (a Ray instance
    interrupted while it started is not stopped by ``ray.shutdown``), streams flushed, exit
    130 without the interpreter's finalization (Ray's native threads, torn down half
    started, crashed it with SIGSEGV here). Every file the job writes is written
    atomically, so nothing is cut short."""
    try:
        kill_children()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)


class JobInterrupts:
    """The CLI's SIGINT handler while a job runs (a context manager; main thread only,
    elsewhere it does nothing).

    Args:
        say: prints one line (on stderr).
        hard_stop: what the second Ctrl-C does before the process exits with 130
            (default: :func:`kill_children`).
    """

    def __init__(self, say: Callable[[str], None],
                 hard_stop: Callable[[], object] | None = kill_children):
        self.say, self.hard_stop = say, hard_stop
        self._before = None
        self._installed = False

    def __enter__(self) -> JobInterrupts:
        _FLAG.clear()
        if threading.current_thread() is threading.main_thread():
            self._before = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._before)
            self._installed = False

    def _handle(self, signum, frame) -> None:
        if not _FLAG.is_set():
            _FLAG.set()
            self.say("interrupt: stopping the job (running trials stay resumable); "
                     "Ctrl-C again to stop at once")
            raise KeyboardInterrupt
        self.say("interrupt: stopped at once")
        try:
            if self.hard_stop is not None:
                self.hard_stop()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
