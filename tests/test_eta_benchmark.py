"""The ETA benchmark's replay, fit and judge from kept sweeps alone (no Ray, no new sweep):
fabricated sweeps in the kept layout of ``benchmarks/eta.py``; and the calibration in code
against the record's kept sweeps, once they are in the repository."""

from __future__ import annotations

import json
import random
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO))

from benchmarks import eta  # noqa: E402


def _fake_sweep(root, seed: int) -> None:
    """A 10-trial sweep on 2 slots in ``root/seed<seed>/``: trials of 2 or 4 epochs at 0.2-0.5
    s an epoch, 0.5 s of start-up each; the ETA series a placeholder."""
    from benchmarks._orch_tools import make_experiment

    exp = make_experiment(10, True, str(root / "runs"), 2, {"search.seed": seed})
    rng = random.Random(seed)
    t0, free, events = 1000.0, [1000.5, 1000.6], []
    for n in range(10):
        i = free.index(min(free))
        start, epochs, s = free[i], rng.choice([2, 4]), rng.uniform(0.2, 0.5)
        config = {"model.resnet.width": 8, "training.epochs": epochs}
        events.append((start, {"event": "start", "params": config, "config": config,
                               "target": epochs}, n))
        for e in range(1, epochs + 1):
            events.append((start + 0.5 + e * s, {"epoch": e, "val_accuracy": rng.random(),
                                                 "train_time_s": s}, n))
        end = start + 0.55 + epochs * s
        events.append((end, {"event": "end", "state": "completed", "epochs": epochs,
                             "reason": None, "error": None}, n))
        free[i] = end + 0.3
    events.sort(key=lambda ev: ev[0])
    d = root / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "trials.jsonl").write_text("".join(
        json.dumps({"trial_id": str(n), "time": t, **rec}) + "\n" for t, rec, n in events))
    reported, done, points = False, 0, []
    for t, rec, _ in events:
        reported |= "epoch" in rec
        done += rec.get("event") == "end"
        points.append([t - t0, 1.0 if reported else None, done, 0.5, 2.0])
    points.append([events[-1][0] + 0.1 - t0, 0.0, done, 0.0, 0.0])  # the close
    (d / "points.json").write_text(json.dumps({
        "points": points, "walls": [t for t, _, _ in events] + [events[-1][0] + 0.1]}))
    (d / "experiment.json").write_text(json.dumps(exp.model_dump(mode="json")))


def test_the_benchmark_replays_fits_and_judges_from_kept_sweeps_alone(tmp_path):
    from automl.search._eta import fit_calibration

    for seed in (0, 1):
        _fake_sweep(tmp_path, seed)
    j = eta.judge(tmp_path, [0])
    rows = json.loads((tmp_path / "scores.json").read_text())
    assert [(r["seed"], r["fraction"]) for r in rows] == [
        (s, f) for s in (0, 1) for f in (0.25, 0.3333, 0.5)]
    for r in rows:
        assert 0 < r["q_lo"] <= r["q_mid"] <= r["q_hi"] and r["real_s"] > 0
        assert r["analytic_s"] > 0 and r["shown"] == [1.0, 0.5, 2.0]
    assert j["calibration"] == fit_calibration(
        [(r["q_lo"], r["q_mid"], r["q_hi"], r["real_s"]) for r in rows if r["seed"] == 0])
    assert j["all"]["n"] == 6 and j["held_out"]["n"] == 3 and j["fit"]["n"] == 3
    assert 0 <= j["held_out"]["coverage"] <= 1 and j["all"]["median_width"] > 0
    # the moments move on through the sweep: less remains at a half than at a quarter
    by = {(r["seed"], r["fraction"]): r["real_s"] for r in rows}
    assert by[(0, 0.25)] > by[(0, 0.3333)] > by[(0, 0.5)]


def test_the_replay_is_the_products_eta_at_that_moment(tmp_path):
    """A ledger fed the sweep's events as they happen gives, at an event, the figures the
    replay rebuilds for that moment."""
    import tempfile
    from pathlib import Path

    from automl.search import Objectives, make_policy
    from automl.search._adapters import judge
    from automl.search._ledger import Ledger
    from automl.search._tuner import epochs_of, eta_of
    from automl.spec import Experiment

    _fake_sweep(tmp_path, 3)
    d = tmp_path / "seed3"
    exp = Experiment.model_validate(json.loads((d / "experiment.json").read_text()))
    policy, now, live = make_policy(exp), [0.0], []
    with tempfile.TemporaryDirectory() as tmp:
        led = Ledger(Path(tmp), exp.search.metric, exp.search.mode, 10, epochs_of(exp),
                     clock=lambda: now[0], eta=eta_of(policy, 2, None, raw=True))
        for line in (d / "trials.jsonl").read_text().splitlines():
            r = json.loads(line)
            now[0] = r["time"] - 1000.0
            n = int(r["trial_id"])
            if r.get("event") == "start":
                led.start(n, r["config"])
            elif r.get("event") == "end":
                led.end(n, state=r["state"])
            else:
                judge(policy, Objectives.of(exp.search), n, r)
                led.report(n, r)
                live.append((r["time"], led.view().eta))
        led.close()
    wall, figures = live[len(live) // 2]
    assert figures is not None and eta.raw_at(d, exp, 1000.0, wall) == figures


def test_the_calibration_in_code_is_what_the_records_kept_sweeps_fit():
    """``automl.search._eta.CALIBRATION`` is the fit on seeds 0-9 of the record's kept
    sweeps (``benchmarks/results/eta_sweeps/scores.json``, written by ``python -m
    benchmarks --only eta``)."""
    from automl.search._eta import CALIBRATION, fit_calibration

    scores = REPO / "benchmarks" / "results" / eta.KEPT / "scores.json"
    if not scores.exists():
        pytest.skip("no kept sweeps in the repository yet (python -m benchmarks --only eta)")
    rows = [r for r in json.loads(scores.read_text()) if r["seed"] in eta.FIT[False]]
    assert fit_calibration(
        [(r["q_lo"], r["q_mid"], r["q_hi"], r["real_s"]) for r in rows]) == CALIBRATION
