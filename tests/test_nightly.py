"""Nightly sweeps: warm start (previous top configs first, previous study informs the
sampler), data snapshots, transfer from the champion's weights, champion / challenger.

Pure functions first (no Ray), then two tiny real sweeps sharing one Ray instance:
A makes the first champion; B runs on changed data, warm-started from the champion, with
transfer, and cannot beat it (margin 0.5)."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest
import torch
from conftest import write_spec
from rich.console import Console
from scipy import stats

from automl.errors import DataError, SpecError
from automl.models import build_model, load_matching_weights
from automl.nightly import (
    Misfit,
    data_change,
    decide,
    fit_space,
    fold_signature,
    paired_comparison,
    run_job,
)
from automl.pipeline import choose_run_dir
from automl.registry import Registry
from automl.spec import Experiment, load_spec

SPACE = {
    "model": {"family": "mlp",
              "mlp": {"depth": 1, "width": {"type": "categorical", "choices": [16, 32]}}},
    "training": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                 "batch_size": 64, "epochs": 2},
}


def _exp(**over) -> Experiment:
    return Experiment.model_validate({**SPACE, **over})


def _params(**over) -> dict:
    base = {"model.family": "mlp", "model.mlp.depth": 1, "model.mlp.width": 16,
            "training.lr": 0.004, "training.optimizer": "adam", "training.batch_size": 64,
            "training.epochs": 2}
    return {**base, **over}


# --------------------------------------------------------------------------- no Ray
def test_fit_space_keeps_searched_params_and_rejects_misfits():
    exp = _exp()
    params, dists = fit_space(exp, _params())
    assert params == {"model.mlp.width": 16, "training.lr": 0.004}
    assert set(dists) == set(params) and dists["training.lr"].log
    with pytest.raises(Misfit, match="training.lr=0.5 is outside"):
        fit_space(exp, _params(**{"training.lr": 0.5}))
    with pytest.raises(Misfit, match="model.mlp.width=64 is outside"):
        fit_space(exp, _params(**{"model.mlp.width": 64}))
    with pytest.raises(Misfit, match="training.lr is searched now but was not then"):
        fit_space(exp, {k: v for k, v in _params().items() if k != "training.lr"})
    with pytest.raises(Misfit, match="training.epochs is fixed at 2 now, was 4"):
        fit_space(exp, _params(**{"training.epochs": 4}))
    with pytest.raises(Misfit):  # True == 1 in Python, but not as a categorical choice
        fit_space(_exp(model={"family": "mlp", "mlp": {
            "depth": 1, "width": {"type": "categorical", "choices": [1, 32]}}}),
            _params(**{"model.mlp.width": True}))


def test_seed_study_keeps_what_fits_a_narrowed_space(tmp_path):
    from automl.nightly import seed_study

    prev, new = tmp_path / "prev", tmp_path / "new"
    prev.mkdir(), new.mkdir()
    wide = {**SPACE["training"], "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}
    old_exp = _exp(name="old", training=wide)
    study = optuna.create_study(study_name="old", direction="maximize",
                                storage=f"sqlite:///{prev / 'study.db'}")
    runs = [(0.004, 16, 0.9), (0.05, 32, 0.95), (0.002, 32, 0.8)]  # 0.05: outside [1e-3, 1e-2]
    for lr, width, value in runs:
        params, dists = fit_space(old_exp, _params(**{"training.lr": lr,
                                                      "model.mlp.width": width}))
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                  value=value))
    params, dists = fit_space(old_exp, _params(**{"training.lr": 0.003, "model.mlp.width": 16}))
    study.add_trial(optuna.trial.create_trial(  # stopped by ASHA after epoch 1
        state=optuna.trial.TrialState.PRUNED, params=params, distributions=dists, value=0.5,
        intermediate_values={1: 0.5}))
    board = [_params(**{"training.lr": lr, "model.mlp.width": w})
             for lr, w, _ in sorted(runs, key=lambda r: -r[2])]
    (prev / "leaderboard.json").write_text(json.dumps([{"params": p} for p in board]))
    (prev / "summary.json").write_text(json.dumps({"winner": {"params": board[1]}}))
    (prev / "spec.yaml").write_text("search: {metric: val_accuracy}\n")
    warm = seed_study(_exp(name="new"), new, str(prev), tmp_path / "registry")
    assert warm["status"] == "seeded" and warm["history_trials"] == 3
    assert warm["skipped"] == {"training.lr outside its new domain": 2}  # history + leaderboard
    assert warm["enqueued"] == [{"model.mlp.width": 16, "training.lr": 0.004},
                                {"model.mlp.width": 32, "training.lr": 0.002}]
    seeded = optuna.load_study(study_name="new", storage=f"sqlite:///{new / 'study.db'}")
    assert [t.state.name for t in seeded.trials] == ["COMPLETE", "COMPLETE", "PRUNED",
                                                     "WAITING", "WAITING"]
    assert sorted(t.value for t in seeded.trials[:2]) == [0.8, 0.9]
    assert seeded.trials[2].intermediate_values == {1: 0.5}  # a stopped trial stays stopped
    assert seeded.trials[3].params == {} and seeded.trials[3].system_attrs["fixed_params"] == \
        warm["enqueued"][0]


def test_paired_comparison_and_the_promotion_rule():
    champ, chall = [0.88, 0.90, 0.90, 0.91], [0.90, 0.92, 0.91, 0.91]
    cmp = paired_comparison(chall, champ)
    assert cmp["mean_diff"] == pytest.approx(0.0125)
    assert (cmp["wins"], cmp["losses"], cmp["ties"], cmp["n"]) == (3, 0, 1, 4)
    ref = stats.ttest_rel(chall, champ, alternative="greater")
    assert cmp["p_t_test"] == pytest.approx(ref.pvalue)
    assert cmp["p_sign_test"] == pytest.approx(0.125)  # 3 wins of 3: 0.5 ** 3
    promote, reason = decide(cmp, 0.01, None, "accuracy", "m@1")
    assert promote and reason.startswith("challenger beats champion m@1: mean paired gain "
                                         "+0.0125 accuracy over 4 folds (3 wins, 0 losses")
    promote, reason = decide(cmp, 0.02, None, "accuracy", "m@1")
    assert not promote and "champion m@1 stays" in reason and "below the margin 0.02" in reason
    promote, reason = decide(cmp, 0.0, 0.01, "accuracy", "m@1")
    assert not promote and "not below alpha 0.01" in reason  # p ~ 0.05
    same = paired_comparison(champ, champ)
    assert same["p_t_test"] is None and same["p_sign_test"] == 1.0
    assert not decide(same, 0.0, None, "accuracy", "m@1")[0]
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_comparison([0.9], [0.9, 0.8])


def test_data_change_names_checksums_rows_and_classes():
    before = {"sha256": "a" * 64, "rows": 1797, "class_counts": {"0": 178, "1": 182}}
    after = {"sha256": "b" * 64, "rows": 1800, "class_counts": {"0": 181, "1": 182, "2": 3}}
    change = data_change(before, after)
    assert change["changed"] and change["rows"] == [1797, 1800]
    assert change["classes_added"] == ["2"] and change["class_counts"]["0"] == [178, 181]
    assert change["line"] == ("data changed: sha256 aaaaaaaaaaaa→bbbbbbbbbbbb, rows 1797→1800, "
                              "new classes 2, class counts 0 178→181")
    assert not data_change(after, after)["changed"]
    assert data_change({"sha256": "a" * 64}, after)["line"].endswith("bbbbbbbbbbbb")
    assert data_change(None, after) is None


def test_transfer_loads_the_champions_weights_only_into_its_architecture():
    arch = {"family": "mlp", "depth": 1, "width": 16}
    torch.manual_seed(1)
    champion = build_model(arch, (64,), 10, init="default")
    transfer = {"ref": "m@1", "arch": dict(arch), "state_dict": champion.state_dict()}
    torch.manual_seed(2)
    trial = build_model(arch, (64,), 10, init="default")
    assert not torch.equal(next(trial.parameters()), next(champion.parameters()))
    assert load_matching_weights(trial, arch, transfer)
    for k, v in champion.state_dict().items():
        assert torch.equal(trial.state_dict()[k], v)
    other = build_model({**arch, "width": 32}, (64,), 10, init="default")
    before = {k: v.clone() for k, v in other.state_dict().items()}
    assert not load_matching_weights(other, {**arch, "width": 32}, transfer)
    wrong_classes = build_model(arch, (64,), 3, init="default")  # same arch, other shapes
    assert not load_matching_weights(wrong_classes, arch, transfer)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    assert not load_matching_weights(trial, arch, None)


def test_fold_signature_changes_with_rows_or_data():
    folds = [(np.arange(5), np.arange(5, 8)), (np.arange(3, 8), np.arange(3))]
    sig = fold_signature("abc", folds)
    assert sig == fold_signature("abc", [(f[0].copy(), f[1].copy()) for f in folds])
    assert sig != fold_signature("abd", folds)
    assert sig != fold_signature("abc", folds[::-1])


def test_nightly_spec_keys(tmp_path):
    exp = _exp(nightly={"warm_start": "m@champion", "promote": True, "champion_margin": 0.002})
    assert exp.nightly.warm_start_top_k == 3 and exp.nightly.uses_champion
    path = write_spec(tmp_path, "nightly: {promote: true}\nregistry: {enabled: false}\n")
    with pytest.raises(SpecError, match=r"spec.yaml: nightly.promote: the champion lives in "
                                        r"the model registry; set registry.enabled: true"):
        load_spec(path)
    with pytest.raises(SpecError, match=r"nightly.champion_margn: unknown key "
                                        r"'champion_margn'; did you mean 'champion_margin'\?"):
        load_spec(write_spec(tmp_path, "nightly: {champion_margn: 0.1}\n"))
    with pytest.raises(SpecError, match="nightly.champion_alias: .*'latest'"):
        load_spec(write_spec(tmp_path, "nightly: {champion_alias: latest}\n"))
    with pytest.raises(SpecError, match=r"nightly.champion_margin: .*less than 1"):
        load_spec(write_spec(tmp_path, "nightly: {champion_margin: 2}\n"))


# --------------------------------------------------------------------------- sweeps
SWEEP = """
name: nightly
data: {{source: npz, path: {path}, seed: 0}}
model:
  family: mlp
  mlp: {{depth: 1, width: {{type: categorical, choices: [16, 32]}}}}
training:
  lr: {{type: float, low: 1e-3, high: 3e-2, log: true}}
  batch_size: 64
  epochs: 2
search: {{num_samples: {n}, seed: {seed}, n_startup_trials: 2}}
scheduler: {{type: none}}
selection: {{top_k: {top_k}, cv_folds: 2}}
tracking: {{backend: none, tensorboard: false}}
registry: {{dir: {registry}}}
nightly: {nightly}
"""


@pytest.fixture(scope="module")
def nights(ray_cluster, tmp_path_factory):
    """Night A (900 rows, 2 trials) makes the first champion; night B (40 rows more) is warm-started
    from it, fine-tunes trials of its architecture, and cannot beat it (margin 0.5)."""
    from sklearn.datasets import load_digits

    tmp = tmp_path_factory.mktemp("nightly")
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    np.savez(tmp / "old.npz", X=X[:900], y=y[:900])
    np.savez(tmp / "new.npz", X=X[:940], y=y[:940])
    console = Console(quiet=True)

    def night(name: str, data: str, n: int, top_k: int, nightly: str, seed: int):
        text = SWEEP.format(path=tmp / data, n=n, seed=seed, top_k=top_k,
                            registry=tmp / "registry", nightly=nightly)
        exp = load_spec(write_spec(tmp, text, f"{name}.yaml"))
        run_dir = choose_run_dir(exp, str(tmp / "runs"), name)
        return exp, run_dir, run_job(exp, run_dir, console=console)

    a = night("a", "old.npz", 2, 2, "{promote: true}", seed=0)
    b = night("b", "new.npz", 3, 1, "{warm_start: nightly@champion, warm_start_top_k: 2, "
                                 "transfer: true, promote: true, champion_margin: 0.5}", seed=1)
    return {"a": a, "b": b, "registry": Registry(tmp / "registry")}


def test_first_night_promotes_its_winner_and_records_its_folds(nights):
    _, run_dir, summary = nights["a"]
    champ = summary["champion"]
    assert champ["promoted"] and champ["champion"] is None
    assert champ["reason"] == "no champion yet: this run's winner becomes it"
    assert champ["champion_now"] == summary["registry"]["winner"] == "nightly@1"
    assert nights["registry"].get("nightly@champion").version == 1
    assert len(champ["challenger"]["scores"]) == 2 and len(champ["folds_sha256"]) == 64
    assert "warm_start" not in summary and "transfer" not in summary


def test_warm_start_runs_the_previous_top_configs_first_and_informs_the_sampler(nights):
    _, a_dir, a_sum = nights["a"]
    _, run_dir, summary = nights["b"]
    warm = summary["warm_start"]
    assert warm["status"] == "seeded" and warm["source"] == "nightly@champion (nightly@1)"
    assert warm["run_dir"] == str(a_dir.resolve())
    expect = []
    for p in [a_sum["winner"]["params"]] + [r["params"] for r in a_sum["leaderboard"]]:
        fitted = {k: p[k] for k in ("model.mlp.width", "training.lr")}
        if fitted not in expect:
            expect.append(fitted)
    assert len(expect) == 2 and warm["enqueued"] == expect
    assert warm["history_trials"] == 2 and warm["skipped"] == {}
    study = optuna.load_study(study_name="nightly", storage=f"sqlite:///{run_dir / 'study.db'}")
    old = [t for t in study.trials if "previous_number" in t.user_attrs]
    a_study = optuna.load_study(study_name="nightly", storage=f"sqlite:///{a_dir / 'study.db'}")
    assert len(old) == 2 and all(t.state.name in ("COMPLETE", "PRUNED") for t in old)
    assert sorted((t.state.name, t.value) for t in old) == sorted(
        (t.state.name, t.value) for t in a_study.trials)
    new = sorted((t for t in study.trials if "previous_number" not in t.user_attrs),
                 key=lambda t: t.datetime_start)
    assert len(new) == 3
    # Optuna hands queued trials out first: the sweep's first trials are A's top configs
    assert [t.params for t in new[:2]] == expect
    assert all("warm_start" in t.user_attrs for t in new[:2])
    assert "warm_start" not in new[2].user_attrs
    trials = json.loads((run_dir / "trials.json").read_text())
    ran = [{k: t["params"][k] for k in ("model.mlp.width", "training.lr")} for t in trials]
    assert all(e in ran for e in expect)


def test_changed_data_is_reported_and_the_champion_retrained_on_the_same_folds(nights):
    _, run_dir, summary = nights["b"]
    change = summary["warm_start"]["data_change"]
    assert change["changed"] and change["rows"] == [900, 940]
    assert change["line"].startswith("data changed: sha256 ") and "rows 900→940" in change["line"]
    champ = summary["champion"]
    assert champ["data_change"]["rows"] == [900, 940]
    assert champ["champion"]["ref"] == "nightly@1"
    assert champ["champion"]["source"] == "its config retrained on this run's folds"
    winner = next(c for c in summary["cv"]["candidates"]
                  if c["trial_id"] == summary["winner"]["trial_id"])
    assert champ["challenger"]["scores"] == [f["scores"]["accuracy"] for f in winner["folds"]]
    cmp = champ["comparison"]
    assert cmp["n"] == 2 and cmp["mean_diff"] == pytest.approx(
        np.mean(champ["challenger"]["scores"]) - np.mean(champ["champion"]["scores"]))
    assert not champ["promoted"] and champ["reason"].startswith("champion nightly@1 stays: ")
    assert "below the margin 0.5" in champ["reason"]
    reg = nights["registry"]
    assert champ["challenger"]["ref"] == "nightly@2" and reg.get("nightly@champion").version == 1
    assert champ["champion_now"] == "nightly@1"


def test_transfer_hands_trials_the_champions_registered_weights(nights):
    from automl.nightly import champion_weights

    exp_a, a_dir, a_sum = nights["a"]
    exp_b, _, summary = nights["b"]
    assert summary["transfer"] == {"from": "nightly@1", "arch": a_sum["winner"]["config"]["arch"]}
    weights = champion_weights(exp_b, nights["registry"].root)
    saved = torch.load(a_dir / "best" / "model.pt", weights_only=True)["model"]
    assert weights["ref"] == "nightly@1" and set(weights["state_dict"]) == set(saved)
    assert all(torch.equal(weights["state_dict"][k], v) for k, v in saved.items())
    model = build_model(weights["arch"], (64,), 10, init="kaiming")
    assert load_matching_weights(model, weights["arch"], weights)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())


def test_same_folds_reuse_the_champions_own_fold_scores(nights):
    """Night A's data and fold plan again: no retraining (no Ray task runs here)."""
    from types import SimpleNamespace

    from automl.data import load_dataset, split_indices
    from automl.nightly._champion import challenge

    exp, a_dir, a_sum = nights["a"]
    data = load_dataset(exp.data)
    splits = split_indices(data.y, exp.data.test_size, exp.data.val_size, exp.data.seed,
                           classes=data.classes)
    mine = [s + 0.01 for s in a_sum["champion"]["challenger"]["scores"]]
    cv = SimpleNamespace(metric="accuracy", winner_candidate=SimpleNamespace(
        trial_id="t", folds=[{"scores": {"accuracy": s}} for s in mine]))
    data_info = json.loads((a_dir / "data.json").read_text())
    exp = exp.model_copy(update={"nightly": exp.nightly.model_copy(
        update={"champion_margin": 0.005})})
    out = challenge(exp, data, splits, cv, data_info, nights["registry"].root, None)
    assert out["folds_sha256"] == a_sum["champion"]["folds_sha256"]
    assert out["champion"]["source"] == "its own cross-validation on the same folds"
    assert out["champion"]["scores"] == a_sum["champion"]["challenger"]["scores"]
    assert out["comparison"]["mean_diff"] == pytest.approx(0.01)
    assert out["promote"] and out["data_change"]["changed"] is False


def test_a_champion_that_cannot_be_scored_stays_and_the_run_survives(nights, monkeypatch):
    from types import SimpleNamespace

    from automl.errors import RunError
    from automl.nightly import _champion

    exp, a_dir, a_sum = nights["a"]

    def broken(*args, **kwargs):
        raise RunError("training trial champion nightly@1 on fold 0 failed: boom",
                       where="selection")

    monkeypatch.setattr(_champion, "_champion_scores", broken)
    cv = SimpleNamespace(metric="accuracy", winner_candidate=SimpleNamespace(
        trial_id="t", folds=[{"scores": {"accuracy": 0.9}}] * 2))
    splits = SimpleNamespace(pool=np.arange(720))
    data = SimpleNamespace(y=np.arange(900) % 10, classes=tuple(str(i) for i in range(10)),
                           task="classification")
    info = json.loads((a_dir / "data.json").read_text())
    out = _champion.challenge(exp, data, splits, cv, info, nights["registry"].root, None)
    assert not out["promote"] and out["comparison"] is None
    assert out["reason"] == ("champion nightly@1 stays: it could not be scored on this run's "
                             "folds (training trial champion nightly@1 on fold 0 failed: boom)")


def test_wrong_warm_start_path_fails_before_ray_starts(tmp_path):
    from typer.testing import CliRunner

    from automl.cli import app

    spec = write_spec(tmp_path, "name: x\n")
    res = CliRunner().invoke(app, ["search", str(spec), "--warm-start", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert res.output.strip() == (f"error: {tmp_path / 'nope'}: warm start run directory does "
                                  "not exist (pass a run directory, or a registry reference "
                                  "NAME@ALIAS or NAME@VERSION)")


def test_missing_warm_start_directory_is_a_one_line_error(tmp_path):
    from automl.nightly import seed_study

    exp = _exp(name="x")
    (tmp_path / "run").mkdir()
    with pytest.raises(DataError, match="warm start run directory does not exist"):
        seed_study(exp, tmp_path / "run", "no-such-dir", tmp_path / "registry")
    cold = seed_study(exp, tmp_path / "run", "x@champion", tmp_path / "registry")
    assert cold["status"].startswith("cold: no model named 'x'")


def test_tabular_run_keeps_its_preprocessor_beside_the_model(nights):
    from automl.data import fit_transform, load_dataset, load_preprocessor, split_indices
    from automl.train import evaluate, load_checkpoint, to_tensors

    exp, run_dir, summary = nights["a"]
    pre = load_preprocessor(run_dir / "best" / "preprocessor.skops")
    ds = load_dataset(exp.data)
    s = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    _, (X_te, y_te) = fit_transform(ds, s.pool, s.test, impute=exp.data.impute)
    raw = ds.frame.iloc[s.test]  # raw test rows, as a user would hold them
    assert np.abs(raw.to_numpy(np.float32)).max() <= 1.0 and X_te.std() > 0.5  # scaled
    X = pre.transform(raw).astype(np.float32)
    assert np.allclose(X, X_te)
    model, _ = load_checkpoint(run_dir / "best" / "model.pt")
    acc = evaluate(model, *to_tensors(X, y_te))["accuracy"]
    assert acc == pytest.approx(summary["test"]["accuracy"])
    # the registered winner carries it too, checksummed like the weights
    (version,) = [v for v in nights["registry"].versions("nightly")
                  if v.lineage.get("sweep") == run_dir.name and v.lineage["kind"] == "winner"]
    assert set(version.files) == {"model.pt", "preprocessor.skops", "model.ts", "model.onnx",
                                  "MODEL_CARD.md"}


def test_a_night_transfers_from_two_earlier_studies_and_its_summary_shows_their_weights(
        nights, tmp_path_factory):
    """Night C (5 trials, 2 at a time) names night A's run directory and night B's study by
    its storage URL: both are read, the sources' portfolio runs first, and summary.json's
    ``transfer_hpo`` gives each source's weight."""
    _, a_dir, _ = nights["a"]
    _, b_dir, _ = nights["b"]
    tmp = tmp_path_factory.mktemp("transfer")
    b_url = f"sqlite:///{(b_dir / 'study.db').resolve()}"
    nightly = (f"{{transfer_from: ['{a_dir}', {{storage: '{b_url}', study: nightly}}], "
               "transfer_portfolio: 2}")
    text = SWEEP.format(path=a_dir.parent.parent / "old.npz", n=5, seed=2, top_k=1,
                        registry=tmp / "registry", nightly=nightly)
    exp = load_spec(write_spec(tmp, text, "c.yaml"))
    run_dir = choose_run_dir(exp, str(tmp / "runs"), "c")
    summary = run_job(exp, run_dir, console=Console(quiet=True))
    section = summary["transfer_hpo"]
    names = [s["name"] for s in section["sources"]]
    assert names == [str(a_dir), f"{b_url}#nightly"]
    assert [s["status"] for s in section["sources"]] == ["used", "used"]
    # A ran 2 trials; B 3 of its own (the 2 its warm start copied from A are not B's)
    assert [s["trials"] for s in section["sources"]] == [2, 3]
    weights = [s["weight"] for s in section["sources"]]
    assert all(isinstance(w, float) and 0.0 <= w <= 1.0 for w in weights)
    assert sum(weights) + section["own_weight"] == pytest.approx(1.0, abs=1e-3)
    assert 0 in section["proposed_by_sources"] and len(section["proposed_by_sources"]) <= 5
    first = section["first_trials"]
    assert first[0]["trial"] == 0 and first[0]["from"] == "sources"
    assert {f["from"] for f in first} <= {"sources", "sampler"}
    study = optuna.load_study(study_name="nightly", storage=f"sqlite:///{run_dir / 'study.db'}")
    assert study.user_attrs["automl.transfer"]["transfer"] == section["proposed_by_sources"]
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["transfer_hpo"]["sources"][0]["weight"] == weights[0]
