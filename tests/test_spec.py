"""The spec: valid examples load, bad input gives one line naming file and key path."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import REPO, write_spec

from automl.errors import EXIT_BAD_INPUT, SpecError
from automl.spec import CategoricalDomain, FloatDomain, IntDomain, load_spec

EXAMPLES = sorted((REPO / "search_spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path):
    exp = load_spec(path)
    assert exp.search.num_samples >= 1
    assert exp.max_epochs >= exp.scheduler.grace_period


def test_main_spec_searches_what_the_issue_asks_for():
    exp = load_spec(REPO / "search_spaces" / "resnet.yaml")
    assert isinstance(exp.training.lr, FloatDomain) and exp.training.lr.log
    assert isinstance(exp.training.batch_size, CategoricalDomain)
    assert isinstance(exp.training.epochs, IntDomain)
    assert set(exp.training.init.choices) == {"kaiming", "xavier", "orthogonal", "default"}
    assert isinstance(exp.model.resnet.depth, IntDomain)
    assert exp.scheduler.type == "asha"


def test_yaml_11_traps(tmp_path):
    path = write_spec(tmp_path, """
training:
  lr: {type: float, low: 1e-4, high: 1E-1, log: true}
  weight_decay: 5e-4
  sgd: {nesterov: true}
model:
  family: mlp
  mlp: {width: {type: categorical, choices: [64, 128]}}
""")
    exp = load_spec(path)
    assert exp.training.lr.low == pytest.approx(1e-4) and exp.training.lr.high == pytest.approx(0.1)
    assert exp.training.weight_decay == pytest.approx(5e-4)
    assert exp.training.sgd.nesterov is True


def test_yes_no_stay_strings_and_are_rejected_as_families(tmp_path):
    path = write_spec(tmp_path, "model:\n  family: {type: categorical, choices: [yes, no]}\n")
    with pytest.raises(SpecError, match=r"model\.family: unknown model family 'yes'"):
        load_spec(path)


BAD = {
    "empty file": ("", r"the spec is empty \(write at least name: and data:"),
    "only a comment": ("# todo\n", r"the spec is empty"),
    "unknown key": ("trainin:\n  lr: 1e-3\n", r"trainin: unknown key 'trainin'; did you mean 'training'"),
    "unknown nested": ("training:\n  sgd: {momentm: 0.9}\n",
                       r"training\.sgd\.momentm: unknown key.*did you mean 'momentum'"),
    "unknown domain key": ("training:\n  lr: {type: float, lo: 1e-4, high: 1e-1}\n",
                           r"training\.lr\.lo: unknown key 'lo'; did you mean 'low'"),
    "reversed range": ("training:\n  lr: {type: float, low: 1e-1, high: 1e-4}\n",
                       r"training\.lr: low must be < high"),
    "empty range": ("training:\n  epochs: {type: int, low: 3, high: 3}\n",
                    r"training\.epochs: low must be < high"),
    "log range at zero": ("training:\n  lr: {type: float, low: 0, high: 1e-1, log: true}\n",
                          r"training\.lr: a log range needs 0 < low < high"),
    "empty choices": ("training:\n  optimizer: {type: categorical, choices: []}\n",
                      r"training\.optimizer\.choices: choices is empty"),
    "mixed choices": ("training:\n  batch_size: {type: categorical, choices: [32, '64']}\n",
                      r"training\.batch_size\.choices: choices mix types"),
    "bool among numbers": ("model:\n  mlp: {width: {type: categorical, choices: [64, true]}}\n",
                           r"choices mix types"),
    "unknown domain type": ("training:\n  lr: {type: loguniform, low: 1, high: 2}\n",
                            r"training\.lr: unknown domain type 'loguniform'"),
    "metric not reported": ("search:\n  metric: val_acc\n",
                            r"search\.metric: unknown metric 'val_acc'; did you mean 'val_accuracy'"),
    "mode against metric": ("search:\n  metric: val_loss\n  mode: max\n",
                            r"search: mode 'max' optimises val_loss the wrong way"),
    "unknown family": ("model:\n  family: {type: categorical, choices: [resnet, vggg]}\n",
                       r"did you mean 'vgg'"),
    "epochs as float range": ("training:\n  epochs: {type: float, low: 1, high: 3}\n",
                              r"training\.epochs: epochs must be an integer"),
    "lr not a number": ("training:\n  lr: fast\n", r"training\.lr: lr must be a number"),
    "negative lr": ("training:\n  lr: -0.1\n", r"training\.lr: lr must be > 0"),
    "grace above budget": ("scheduler:\n  grace_period: 50\n",
                           r"scheduler\.grace_period: 50 is more than the 10 epochs"),
    "epochs above max": ("training:\n  epochs: 30\nscheduler:\n  max_epochs: 10\n",
                         r"training\.epochs: can reach 30 but scheduler\.max_epochs is 10"),
    "conv on tabular": ("data:\n  source: wine\n", r"model\.family: 'resnet' needs image data"),
    "negative trials": ("search:\n  num_samples: -1\n",
                        r"search\.num_samples: must be at least 1, got -1 \(use 1 or more\)"),
    "duplicate key": ("search:\n  seed: 1\n  seed: 2\n", r"duplicate key 'seed'"),
    "bad yaml": ("search: [\n", r"line 2, column 1"),
    "not a mapping": ("- a\n- b\n", r"top level must be a mapping"),
    "unknown dataset": ("data:\n  source: mnist\n", r"data\.source: unknown data source 'mnist'"),
    "bad name": ("name: ../escape\n", r"name: must be a name of letters, digits, '_', '\.' and '-'"),
    "wrong sampler": ("search:\n  sampler: bayes\n",
                      r"search\.sampler: must be one of 'auto', 'tpe', .* or 'nsga2', got 'bayes'"),
}


@pytest.mark.parametrize("case", sorted(BAD), ids=str)
def test_bad_specs_give_one_line_with_file_and_key(tmp_path, case):
    text, pattern = BAD[case]
    path = write_spec(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": ")
    assert "\n" not in message
    assert info.value.exit_code == EXIT_BAD_INPUT
    import re

    assert re.search(pattern, message), message


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(bad)


def test_overrides_apply_before_validation(tmp_path):
    path = write_spec(tmp_path, "search:\n  num_samples: 40\n")
    assert load_spec(path, {"search.num_samples": 3}).search.num_samples == 3
    with pytest.raises(SpecError, match=r"search\.num_samples"):
        load_spec(path, {"search.num_samples": 0})


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "automl", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_cli_bad_spec_exits_2_writes_nothing_starts_no_ray(tmp_path):
    path = write_spec(tmp_path, "training:\n  lr: {type: float, low: 1, high: 0.1}\n")
    out = tmp_path / "runs"
    t0 = time.monotonic()
    proc = _cli("search", str(path), "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "training.lr" in lines[0]
    assert not out.exists()
    assert not list(tmp_path.glob("**/session_*"))
    assert time.monotonic() - t0 < 60


def test_cli_validate_prints_space_size(tmp_path):
    path = write_spec(tmp_path, """
model:
  family: {type: categorical, choices: [resnet, mlp]}
  resnet: {depth: {type: int, low: 1, high: 3}}
  mlp: {width: {type: categorical, choices: [64, 128]}}
training:
  optimizer: {type: categorical, choices: [adam, sgd]}
  sgd: {nesterov: {type: categorical, choices: [true, false]}}
  batch_size: {type: categorical, choices: [32, 64]}
""")
    proc = _cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # (3 resnet depths + 2 mlp widths) x (adam + 2 sgd variants) x 2 batch sizes = 30
    assert "30 configurations" in proc.stdout
    assert "when model.family == resnet" in proc.stdout
    assert "when training.optimizer == sgd" in proc.stdout


def test_cli_validate_refuses_a_missing_data_file_in_one_line(tmp_path):
    path = write_spec(tmp_path, "data: {source: csv, path: nowhere.csv, target: y}\n"
                                "model: {family: mlp}\n")
    proc = _cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nowhere.csv: no such file or folder" in lines[0], proc.stderr
    assert f"relative paths resolve against {tmp_path}" in lines[0]
    # validate reads the data as search does: a single row is refused, 40 rows of 2 classes not
    (tmp_path / "nowhere.csv").write_text("a,y\n1,0\n")
    assert _cli("validate", str(path), cwd=tmp_path).returncode == 2
    (tmp_path / "nowhere.csv").write_text("a,y\n" + "".join(f"{i},{i % 2}\n" for i in range(40)))
    assert _cli("validate", str(path), cwd=tmp_path).returncode == 0


def test_cli_num_samples_below_one_is_blamed_on_the_flag(tmp_path):
    path = write_spec(tmp_path, "name: x\n")
    proc = _cli("search", str(path), "--num-samples", "0", "--output", str(tmp_path / "runs"),
                cwd=tmp_path)
    assert proc.returncode == 2 and "'--num-samples'" in proc.stderr, proc.stderr
    assert str(path) not in proc.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("scheduler,search,expected,adaptive", [
    ({}, {}, 2, True),  # auto: rungs 1, 3, 9 of 10 epochs, a window of 2 that adapts
    ({"max_epochs": 2}, {}, 1, False),  # auto: one rung (1) only
    ({"brackets": 1}, {}, 1, False),
    ({"brackets": 2}, {}, 2, False),  # an explicit count: fixed brackets
    ({"brackets": 3}, {}, 3, False),
    ({}, {"objectives": [{"metric": "val_accuracy", "mode": "max"},  # MO-ASHA: fixed
                         {"metric": "params", "mode": "min"}], "sampler": "tpe"}, 2, False),
])
def test_brackets_default_to_two_when_the_rungs_allow(scheduler, search, expected, adaptive):
    from automl.search import make_policy
    from automl.spec import Experiment

    exp = Experiment.model_validate({"name": "b", "training": {"epochs": 2 if scheduler.get(
        "max_epochs") else 10}, "scheduler": {"type": "asha", **scheduler}, "search": search})
    assert exp.bracket_count() == expected
    assert exp.adaptive_bracketing() is adaptive
    policy = make_policy(exp)
    assert policy.width == expected and policy.adaptive is adaptive
    # fixed: the brackets that run; adaptive: one per rung, of which `expected` at once
    assert len(policy.brackets) == (3 if adaptive else expected)
    assert sum(w > 0 for w, _ in policy.bracket_weights()) == expected
    # adaptive: probes and narrowing at the product's defaults; fixed brackets: neither
    assert (policy.probe_trials, policy.narrow_at) == ((12, 0.8) if adaptive else (0, None))
