"""The sweep's event ledger without Ray running: one end-state rule, one set of counts, a
file a resumed sweep reads back, and sinks that can be slow or broken without holding up
or stopping the sweep."""

from __future__ import annotations

import threading

import pytest

from automl.search import TrialLog
from automl.search._ledger import InBackground, Ledger, error_text, read_ledger

CONFIG = {"training.epochs": 3, "model.family": "mlp"}


class Recorder:
    def __init__(self, fail_on: str | None = None, gate: threading.Event | None = None):
        self.calls: list[tuple] = []
        self.fail_on, self.gate = fail_on, gate

    def start(self, trial, sweep):
        if self.gate is not None:
            assert self.gate.wait(30)
        self._call("start", trial.trial_id, sweep.running)

    def log(self, trial, row, sweep):
        self._call("log", trial.trial_id, row["epoch"])

    def finish(self, trial, sweep):
        self._call("finish", trial.trial_id, trial.end["state"], dict(sweep.ended))

    def close(self, sweep):
        self._call("close", sweep.done)

    def _call(self, *what):
        if what[0] == self.fail_on:
            raise RuntimeError(f"{what[0]} broke")
        self.calls.append(what)


def _ledger(tmp_path, *sinks):
    return Ledger(tmp_path, "val_accuracy", "max", 4, lambda c: int(c["training.epochs"]),
                  params_of=lambda n: {"p": n}, sinks=sinks)


def test_events_counts_and_the_file_a_resume_reads(tmp_path):
    rec = Recorder()
    led = _ledger(tmp_path, rec)
    led.start(0, {**CONFIG, "automl.trial": 0})
    for e in (1, 2, 3):
        led.report(0, {"epoch": e, "val_accuracy": 0.1 * e, "ignored": 1})
    led.end(0)
    led.start(1, CONFIG)
    led.report(1, {"epoch": 1, "val_accuracy": 0.9})
    led.end(1)  # 1 of 3 epochs: stopped early
    led.end(1)  # a trial ends once
    led.start(2, CONFIG)
    led.report(2, {"epoch": 1, "val_accuracy": 0.5})
    led.end(2, error="Traceback ...\nautoml.train.TrialDiverged: diverged at epoch 1: loss=nan")
    led.start(3, CONFIG)  # still running when the driver dies
    v = led.view()
    assert (v.running, v.ended, v.best, v.best_trial, v.epochs, v.done) == (
        1, {"completed": 1, "stopped_early": 1, "failed": 0, "diverged": 1}, 0.9, "1", 5, 3)
    assert [c[0] for c in rec.calls].count("finish") == 3
    led.close()
    trials, reports = read_ledger(tmp_path / "trials.jsonl")
    assert [(n, e) for n, e, _ in reports] == [(0, 1), (0, 2), (0, 3), (1, 1), (2, 1)]
    assert trials[0].params == {"p": 0} and "automl.trial" not in trials[0].config
    assert trials[0].rows[0] == {"epoch": 1, "val_accuracy": 0.1}  # unknown keys dropped
    assert trials[2].end["reason"] == "diverged at epoch 1: loss=nan"
    assert trials[3].started and trials[3].end is None
    again = _ledger(tmp_path)  # a resumed sweep: the same counts from the file
    assert again.view().ended == v.ended and again.view().best == 0.9
    again.close()


def test_a_slow_sink_works_in_order_in_the_background_and_a_broken_one_is_dropped(tmp_path):
    gate = threading.Event()
    slow, broken = Recorder(gate=gate), Recorder(fail_on="log")
    led = _ledger(tmp_path, InBackground(slow), broken)
    led.start(0, CONFIG)  # returns while the slow sink still waits at its gate
    led.report(0, {"epoch": 1, "val_accuracy": 0.5})
    led.report(0, {"epoch": 2, "val_accuracy": 0.6})
    assert slow.calls == [] and broken not in led.sinks  # dropped at its failure
    gate.set()
    led.end(0)
    led.close()  # drains the background queue
    assert [c[:2] for c in slow.calls] == [("start", "0"), ("log", "0"), ("log", "0"),
                                           ("finish", "0"), ("close", 1)]
    assert [c[2] for c in slow.calls if c[0] == "log"] == [1, 2]


def test_error_text_is_the_last_failure_of_the_trials_error_file(tmp_path):
    err = tmp_path / "error.txt"
    err.write_text("Failure # 1 (occurred at 2026-01-01_00-00-00)\nfirst\n"
                   "Failure # 2 (occurred at 2026-01-01_00-00-05)\nsecond try\nValueError: x\n")

    class T:
        error_file = str(err)

        def get_error(self):
            return None

    assert error_text(T()) == "second try\nValueError: x"
    T.error_file = str(tmp_path / "missing.txt")
    assert error_text(T()) == "failed"
    assert TrialLog(3).trial_id == "3"


def test_the_sweeps_eta_is_computed_once_an_event_and_carries_its_range(tmp_path):
    from automl._progress import Eta
    from automl.search import RungPolicy
    from automl.search._eta import calibrate
    from automl.search._tuner import eta_of

    now = [0.0]
    policy = RungPolicy(1, 3, 3)
    model = eta_of(policy, slots=2, time_budget_s=None)
    calls = []

    def eta(ledger):
        calls.append(ledger.epochs)
        return model(ledger)

    seen = []

    class Views:
        def start(self, trial, sweep):
            seen.append(sweep)

        log = finish = close = lambda self, *a: seen.append(a[-1])

    led = Ledger(tmp_path, "val_accuracy", "max", 6, lambda c: int(c["training.epochs"]),
                 sinks=[Views(), Views()], clock=lambda: now[0], eta=eta)
    for n in (0, 1):
        led.start(n, CONFIG)
    assert seen[-1].eta is None and len(calls) == 2  # no epoch yet: no estimate
    for n, s in ((0, 0.2), (1, 0.6)):
        now[0] += 1.0
        led.report(n, {"epoch": 1, "val_accuracy": 0.5 + n / 10, "train_time_s": s})
        policy.on_report(n, 1, 0.5 + n / 10)
    assert len(calls) == 4 and seen[-1] is seen[-2]  # one view for both sinks
    e = seen[-1].eta
    assert isinstance(e, Eta) and e.low <= e.s <= e.high and e.low < e.high
    assert seen[-1].eta_s == e.s
    raw = eta_of(policy, slots=2, time_budget_s=None, raw=True)(led)
    assert calibrate(raw) == e  # what the product shows is the calibrated Monte Carlo
    capped = eta_of(policy, slots=2, time_budget_s=3.0)(led)
    assert capped.high <= 1.0  # 3 s of budget, 2 s spent
    led.close()


def test_trials_the_job_budget_stopped_end_at_their_last_report(tmp_path):
    from automl.search import Objectives
    from automl.search._tuner import end_budget_stopped

    told = []

    class Study:
        def end(self, number, state, epoch=None, value=None, constraints=None):
            told.append((number, state, epoch, value))

    led = _ledger(tmp_path)
    for n in (0, 1, 2, 3):
        led.start(n, CONFIG)  # 3 epochs each
    for n, epochs in ((0, 3), (1, 2), (3, 3)):
        for e in range(1, epochs + 1):
            led.report(n, {"epoch": e, "val_accuracy": 0.1 * e + n})
    led.end(0)  # ended before the budget stopped the sweep
    end_budget_stopped(Study(), led, Objectives(("val_accuracy",), ("max",)))
    assert told == [(1, "stopped_early", 2, pytest.approx(1.2)), (2, "failed", None, None),
                    (3, "completed", 3, pytest.approx(3.3))]
    assert led.trials[1].end["state"] == "stopped_early"
    assert led.trials[1].end["reason"] == "the job budget ended the sweep"
    assert led.trials[2].end["state"] == "failed" and "before its first epoch" in \
        led.trials[2].end["reason"]
    assert led.view().running == 0
    led.close()
    again, _ = read_ledger(tmp_path / "trials.jsonl")  # written, as every end
    assert again[1].end["state"] == "stopped_early"


def test_an_eta_that_cannot_be_made_never_stops_the_sweep(tmp_path, caplog):
    from automl._progress import Eta

    def eta(ledger):
        return Eta(float("nan"), 0.0, 1.0)  # raises: odd figures (e.g. a NaN epoch time)

    rec = Recorder()
    led = Ledger(tmp_path, "val_accuracy", "max", 2, lambda c: int(c["training.epochs"]),
                 sinks=[rec], eta=eta)
    led.start(0, CONFIG)
    led.report(0, {"epoch": 1, "val_accuracy": 0.5})
    assert led.view().eta is None and [c[0] for c in rec.calls] == ["start", "log"]
    assert sum("no ETA (ValueError" in r.message for r in caplog.records) == 1  # logged once
    led.close()
