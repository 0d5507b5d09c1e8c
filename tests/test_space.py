"""Spec -> Optuna define-by-run space: conditional branches, distinct names, fixed values."""

from __future__ import annotations

import optuna
from conftest import write_spec

from automl.space import TrialConfig, define_by_run, describe
from automl.spec import load_spec

SPEC = """
model:
  family: {type: categorical, choices: [resnet, vgg, mlp, vit]}
  resnet: {depth: {type: int, low: 1, high: 3}, width: 16}
  vgg: {width: {type: categorical, choices: [8, 16]}}
training:
  optimizer: {type: categorical, choices: [adam, sgd]}
  lr: {type: float, low: 1e-4, high: 1e-1, log: true}
  sgd: {momentum: {type: float, low: 0.5, high: 0.99}}
  epochs: {type: int, low: 2, high: 8, step: 2}
"""


def test_conditional_parameters_only_in_their_branch(tmp_path):
    exp = load_spec(write_spec(tmp_path, SPEC))
    space = define_by_run(exp)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        fixed = space(trial)
        flat = {**trial.params, **fixed}
        fam = flat["model.family"]
        seen.add(fam)
        other = {k for k in flat if k.startswith("model.") and k != "model.family"}
        assert all(k.startswith(f"model.{fam}.") for k in other), flat
        assert ("training.sgd.momentum" in flat) == (flat["training.optimizer"] == "sgd")
        if fam == "resnet":
            assert flat["model.resnet.width"] == 16 and "model.resnet.width" not in trial.params
            assert 1 <= flat["model.resnet.depth"] <= 3
        assert flat["training.epochs"] in (2, 4, 6, 8)
        cfg = TrialConfig.from_flat(flat, exp)
        assert cfg.arch["family"] == fam
        assert cfg.momentum == (flat.get("training.sgd.momentum", 0.0))
        study.tell(trial, 0.5)
    assert seen == {"resnet", "vgg", "mlp", "vit"}


def test_describe_counts_and_flags_continuous(tmp_path):
    exp = load_spec(write_spec(tmp_path, SPEC))
    info = describe(exp)
    names = {p["name"] for p in info["parameters"]}
    assert {"model.resnet.depth", "model.vgg.width", "training.sgd.momentum"} <= names
    assert info["size"] == float("inf")  # lr is a continuous range
    assert info["searched"] == 7
