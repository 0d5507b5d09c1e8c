"""The sweep ETA's models replayed on finished sweeps: what the ETA would have said at 1/4,
1/3 and 1/2 of each sweep's wall time under other models, against the time that really
remained. It reads the sweeps ``python -m benchmarks --only eta`` keeps
(``benchmarks/results/eta_sweeps/seed<N>/``: ``trials.jsonl``, ``points.json`` with the
ETA series and the Unix time of each event, ``experiment.json``, ``study.db.gz``;
:func:`benchmarks.eta.keep`) and rebuilds the sweep's state at each moment from
``trials.jsonl`` (trials started, their epochs, ends and epoch times; the rung policy
replayed on the reports).

Models of the point (seconds still to go = (expected epoch seconds + trials to come x
overhead per trial) / slots, as :func:`automl.search._eta.sweep_eta`):

* ``current``: the model's expectation (:func:`automl.search._eta.sweep_eta`: one
  epoch-weighted mean of seconds per epoch for every trial; the product's point before
  issue 44, now the "analytic point" of ``benchmarks/eta.py``);
* ``per_trial``: a running trial at its own seconds per epoch, a trial to come at the mean
  over trials (each trial weighs the same);
* ``top_blend``: a trial to come costs the mean of two restart costs (its seconds per
  epoch times its expected epochs): over every trial, and over the best quarter (Optuna's
  order: complete trials by value, then pruned ones by step): TPE samples near its best;
* ``sampler``: the trials to come are the sampler's own proposals (a copy of the study at
  that moment, ``left`` asks with the running trials as constant liars), each costed by a
  random forest of log seconds per epoch on the parameters of the trials so far.

The product's range and calibrated point are judged by ``python -m benchmarks.eta judge``.

Run as ``python -m benchmarks.eta_replay [DIR]``; prints one line per seed and a summary
per moment. Used in issue 16 on 10 seeds: none beat ``current`` at 1/3.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

FRACTIONS = (1 / 4, 1 / 3, 1 / 2)
MODELS = ("current", "per_trial", "top_blend", "sampler")


def state_at(run: Path, exp, wall: float):
    """The sweep whose ``trials.jsonl`` is in ``run`` at Unix time ``wall``: ``(policy,
    trials, epoch seconds in order, starts)``; ``trials[n]`` holds ``epoch``, ``target``,
    ``ended``, ``s`` (seconds per epoch, each epoch), ``v`` (the last value) and ``t``
    (start time); ``starts`` is ``[(start time, epochs reported before it)]``."""
    from automl.search import make_policy

    policy = make_policy(exp)
    trials, rows, starts = {}, [], []
    for line in (run / "trials.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["time"] > wall:
            break
        n, event = int(r["trial_id"]), r.get("event")
        if event == "start":
            trials[n] = {"epoch": 0, "target": int(r.get("target", 0)), "ended": False,
                         "s": [], "v": None, "t": r["time"], "params": r.get("params", {})}
            starts.append((r["time"], len(rows)))
        elif event == "end":
            trials[n]["ended"] = True
        elif "epoch" in r:
            s = r.get("train_time_s", 0.0) + r.get("eval_time_s", 0.0)
            trials[n].update(epoch=r["epoch"], v=r.get(exp.search.metric))
            trials[n]["s"].append(s)
            rows.append(s)
            policy.on_report(n, r["epoch"], r.get(exp.search.metric))
    return policy, trials, rows, starts


def _features(params: dict, keys: list[str]) -> list[float]:
    out = []
    for k in keys:
        v = params.get(k)
        if v is None or isinstance(v, bool):
            out.append(float(bool(v)))
        elif isinstance(v, (int, float)):
            out.append(math.log(v) if v > 0 else 0.0)
        else:
            out.append(float(sum(map(ord, str(v))) % 97))
    return out


def estimate(model: str, state, exp, t0: float, wall: float, total: int, slots: int,
             study_db: Path | None = None) -> float | None:
    """Seconds still to go under ``model`` (module doc) at Unix time ``wall``, or None
    before any epoch was reported. ``state``: :func:`state_at`'s; ``t0``: the sweep's
    start (Unix seconds); ``study_db``: the run's ``study.db`` (``sampler`` only).

    Raises:
        ValueError: ``model`` is not one of :data:`MODELS`.
    """
    from automl.search._eta import PRIOR, TrialState, expected_epochs, sweep_eta

    policy, trials, rows, starts = state
    if not rows:
        return None
    elapsed = wall - t0
    warm = None
    if len(starts) >= slots:
        w_t, w_e = starts[slots - 1]
        warm = (w_t - t0, w_e, slots)
    if model == "current":
        return sweep_eta([TrialState(t["epoch"], t["target"], t["ended"], policy.bracket_of(n))
                          for n, t in trials.items()], total, rungs=policy.rung_epochs(),
                         passed=policy.pass_counts(), reduction_factor=policy.reduction_factor,
                         epoch_s=sum(rows) / len(rows), elapsed_s=elapsed, slots=slots,
                         epochs_done=len(rows), warm=warm, brackets=policy.bracket_weights())
    passed, rf = policy.pass_counts(), policy.reduction_factor

    def rate(r: int) -> float:
        cont, judged = passed.get(r, (0, 0))
        return (cont + PRIOR / rf) / (judged + PRIOR)

    brackets = policy.bracket_weights()

    def epochs_left(start: int, target: int, n: int | None) -> float:
        if n is None:  # a trial to come: each bracket with its probability
            return sum(w * expected_epochs(0, target, r, rate) for w, r in brackets)
        return expected_epochs(start, target, brackets[min(policy.bracket_of(n),
                                                           len(brackets) - 1)][1], rate)

    have = {n: t for n, t in trials.items() if t["s"]}
    own = {n: statistics.mean(t["s"]) for n, t in have.items()}
    mean_s = statistics.mean(own.values())
    left = max(0, total - len(trials))
    work = sum(own.get(n, mean_s) * epochs_left(t["epoch"], t["target"], n)
               for n, t in trials.items() if not t["ended"])
    mean_target = round(sum(t["target"] for t in trials.values()) / len(trials))
    if model == "per_trial":
        work += left * mean_s * epochs_left(0, mean_target, None)
    elif model == "top_blend":
        cost = {n: own[n] * epochs_left(0, t["target"], None) for n, t in have.items()}
        ranked = sorted((n for n, t in have.items() if t["v"] is not None),
                        key=lambda n: (1, 0, have[n]["v"]) if have[n]["epoch"] >= have[n]["target"]
                        else (0, have[n]["epoch"], have[n]["v"]), reverse=True)
        top = ranked[:max(1, round(len(ranked) / 4))] or list(cost)
        work += left * (statistics.mean(cost.values())
                        + statistics.mean(cost[n] for n in top)) / 2
    elif model == "sampler":
        work += sum(s * e for s, e in _proposals(exp, trials, own, wall, left, study_db,
                                                 epochs_left))
    else:
        raise ValueError(f"unknown model {model!r}; one of {MODELS}")
    spent_w = sum(rows[warm[1]:]) if warm else sum(rows)
    base = (elapsed - warm[0]) if warm else elapsed
    started_w = len(trials) - (warm[2] if warm else 0)
    overhead = max(0.0, base * slots - spent_w) / max(started_w, 1)
    return (work + left * overhead) / slots


def _proposals(exp, trials, own, wall, left, study_db, epochs_left):
    """``[(predicted seconds per epoch, expected epochs)]`` of the sampler's next ``left``
    proposals from a copy of the study as it stood at ``wall``."""
    import numpy as np
    import optuna
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial
    from sklearn.ensemble import RandomForestRegressor

    from automl.search._sampler import make_sampler
    from automl.space import define_by_run

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    src = optuna.load_study(study_name=exp.name, storage=f"sqlite:///{study_db}")
    copy = optuna.create_study(directions=src.directions,
                               sampler=make_sampler(exp.search, seed=exp.search.seed + 1000))
    for ft in src.get_trials(deepcopy=False):
        if ft.datetime_start is None or ft.datetime_start.timestamp() > wall:
            continue
        if ft.datetime_complete is not None and ft.datetime_complete.timestamp() <= wall:
            copy.add_trial(ft)
        else:
            copy.add_trial(create_trial(state=OptunaState.RUNNING, params=ft.params,
                                        distributions=ft.distributions))
    keys = sorted({k for t in trials.values() for k in t["params"]})
    forest = RandomForestRegressor(200, random_state=0, min_samples_leaf=2).fit(
        [_features(trials[n]["params"], keys) for n in own], [math.log(s) for s in own.values()])
    fn, out = define_by_run(exp), []
    for _ in range(left):
        t = copy.ask()
        fixed = fn(t)  # suggests first: t.params is empty before
        p = {**t.params, **fixed}
        s = float(np.exp(forest.predict([_features(p, keys)])[0]))
        out.append((s, epochs_left(0, int(p.get("training.epochs", 1)), None)))
    return out


def study_of(d: Path, tmp: Path) -> Path | None:
    """The kept sweep ``d``'s ``study.db`` (from ``study.db.gz``, into ``tmp``), or None."""
    import gzip
    import shutil

    if not (d / "study.db.gz").exists():
        return None
    out = tmp / f"{d.name}.db"
    with gzip.open(d / "study.db.gz", "rb") as g, open(out, "wb") as f:
        shutil.copyfileobj(g, f)
    return out


def replay(root: Path, slots: int = 2, models: tuple[str, ...] = MODELS) -> dict:
    """``{model: {fraction: [error per seed]}}`` over every kept ``root/seed<N>``, printing
    one line per seed (``sampler`` needs the kept study: left out without one)."""
    import tempfile

    from automl.spec import Experiment

    errors = {m: {f: [] for f in FRACTIONS} for m in models}
    tmp = Path(tempfile.mkdtemp(prefix="eta-replay-"))
    for d in sorted(root.glob("seed*"), key=lambda p: int(p.name[4:])):
        if not (d / "points.json").exists():
            continue
        seed = int(d.name[4:])
        kept = json.loads((d / "points.json").read_text())
        points, walls = kept["points"], kept["walls"]
        t0, end = walls[0] - points[0][0], points[-1][0]
        exp = Experiment.model_validate(json.loads((d / "experiment.json").read_text()))
        trials, db = exp.search.num_samples, study_of(d, tmp)
        line = [f"seed {seed} (wall {end:.0f} s)"]
        for f in FRACTIONS:
            i = next(i for i, p in enumerate(points) if p[0] >= end * f and p[1] is not None)
            real = end - points[i][0]
            state = state_at(d, exp, walls[i])
            for m in models:
                if m == "sampler" and db is None:
                    continue
                e = estimate(m, state, exp, t0, walls[i], trials, slots, db)
                errors[m][f].append((e - real) / real)
            line.append(f"{f:.2f}: " + " ".join(f"{m} {errors[m][f][-1]:+.0%}" for m in models
                                                 if errors[m][f]))
        print(" | ".join(line), flush=True)
    for f in FRACTIONS:
        print(f"--- at {f:.2f} of the wall")
        for m in models:
            e = errors[m][f]
            if e:
                print(f"{m:10s} within 25%: {sum(abs(x) <= 0.25 for x in e)}/{len(e)}, median "
                      f"|error| {statistics.median(abs(x) for x in e):.0%}: "
                      + " ".join(f"{x:+.0%}" for x in e))
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, nargs="?",
                    default=Path(__file__).parent / "results" / "eta_sweeps",
                    help="the kept sweeps (default benchmarks/results/eta_sweeps)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " +
                    ", ".join(MODELS))
    args = ap.parse_args()
    replay(args.root, models=tuple(args.models.split(",")))


if __name__ == "__main__":
    main()
