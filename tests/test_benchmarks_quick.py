"""The benchmarks keep working: the search-quality simulation replays Ray Tune exactly, the
quick search-quality benchmark writes its documented record, and the pure helpers
compute what they claim. Benchmarks measure; nothing here checks a speed."""

from __future__ import annotations

import json
import sys

import pytest
import ray.cloudpickle
from conftest import REPO

sys.path.insert(0, str(REPO))
# Ray's workers cannot import this test module: ship its functions (the objective) by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

from benchmarks import _simulate, scaling, search_quality  # noqa: E402
from benchmarks.__main__ import main  # noqa: E402


def bowl(config: dict, epoch: int) -> float:
    """A cheap multi-fidelity objective: a bowl that sharpens as epochs grow."""
    return sum((config[f"X_{i}"] - 0.3) ** 2 for i in range(6)) + 1.0 / epoch


def _stack(sampler: str):
    exp = search_quality._experiment(sampler, seed=3, n_startup=4, rf=3, grace=1, asha=True)
    return search_quality._stack(exp)


def test_simulation_replays_ray_tune_report_by_report(ray_cluster, tmp_path):
    searcher, scheduler = _stack("tpe")
    real = _simulate.run_tune_runtime(searcher, lambda: scheduler(False), bowl, 60, 9,
                                      str(tmp_path))
    sim = _simulate.simulate_tune(searcher(), scheduler(), bowl, 60, 9)
    assert len(real) == len(sim) == 60
    assert [r[:2] for r in real] == [s[:2] for s in sim]
    assert [r[2] for r in real] == pytest.approx([s[2] for s in sim], abs=1e-12)
    # ASHA (grace 1, rf 3, max 9) stopped some trials at rung 1 or 3 and let others run on
    ends = {}
    for trial, epoch, _ in sim:
        ends[trial] = epoch
    last = max(ends)
    finished = [e for t, e in ends.items() if t != last]  # the last one hit the budget
    assert set(finished) <= {1, 3, 9} and 1 in finished and len(ends) > 60 // 9


def test_budget_is_counted_in_epochs_and_random_without_asha_trains_fully():
    exp = search_quality._experiment("random", seed=0, n_startup=4, rf=3, grace=1, asha=False)
    searcher, scheduler = search_quality._stack(exp)
    log = _simulate.simulate_tune(searcher(), scheduler(), bowl, 25, 9)
    assert len(log) == 25
    assert [e for t, e, _ in log if t < 2] == list(range(1, 10)) * 2


def test_regret_helpers():
    log = [(0, 1, 5.0), (0, 2, 3.0), (1, 1, 4.0), (1, 2, 1.5)]
    curve = search_quality.incumbent(log, optimum=1.0)
    assert curve == [4.0, 2.0, 2.0, 0.5]
    assert search_quality._reach(curve, 2.0) == 2
    assert search_quality._reach(curve, 0.1) is None
    assert search_quality.wins([curve, curve], [[3.0] * 4, [0.2] * 4], 4) == 1


def test_report_timing_from_trials_jsonl(tmp_path):
    rows = []
    for k, start in enumerate((0.0, 10.0)):  # two trials, 3 epochs 2 s apart, one at a time
        rows += [{"trial_id": f"t{k}", "time": start + 2.0 * e, "epoch": e + 1,
                  "train_time_s": 1.5} for e in range(3)]
    (tmp_path / "trials.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = scaling.report_timing(tmp_path)
    assert t["trials"] == 2 and t["epoch_wall_s"] == 2.0 and t["epoch_train_s"] == 1.5
    assert t["startup_per_trial_s"] == 4.0  # 10 - 4 - one epoch


def test_quick_search_quality_writes_its_record(ray_cluster, tmp_path):
    pytest.importorskip("mfpbench")
    assert main(["--quick", "--only", "search_quality", "--seeds", "1",
                 "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "search_quality.json").read_text())
    assert rec["status"] == "ok" and rec["quick"] is True
    assert rec["machine"]["cores"] >= 1 and rec["machine"]["memory_gib"] > 0
    assert rec["versions"]["optuna"] and rec["versions"]["mf-prior-bench"] != "missing"
    assert rec["seeds"]["seeds"] == [0]
    table = rec["tables"][0]
    assert [r[0] for r in table["rows"]] == ["automl", "random", "random_asha", "optuna"]
    for row in table["rows"]:
        assert 0.0 <= row[1] < 6.0  # regret on Hartmann6 (optimum -3.32, values <= ~0)
    assert rec["data"]["tune_conformance"]["identical"] is True
    assert len(rec["goals"]) == 2
    md = (tmp_path / "search_quality.md").read_text()
    assert "| automl |" in md and "Machine: " in md


def test_missing_benchmark_package_is_reported_not_faked(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mfpbench", None)  # import mfpbench -> ImportError
    assert main(["--quick", "--only", "search_quality", "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "search_quality.json").read_text())
    assert rec["status"] == "unavailable" and "mf-prior-bench" in rec["reason"]
    assert rec["tables"] == [] and rec["goals"] == []
