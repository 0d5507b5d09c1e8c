"""Issue 41 (parts 1 and 5): the user's own model, a family named by an import path
``package.module:factory``: the spec, the search space, building, the example end to end
from the command line, and every later stage with models that are awkward on purpose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
import torch
from conftest import REPO, write_spec
from rich.console import Console
from typer.testing import CliRunner

from automl.cli import app
from automl.spec import load_spec

EXAMPLE = REPO / "examples" / "user_model"
#: a package of deliberately awkward models, written to a temporary folder
AWKWARD = "i41_awkward"
AWKWARD_SRC = '''"""Models a real user might write, each awkward for one later stage."""
import torch
from torch import nn

__version__ = "2.0"


class Branchy(nn.Module):
    """Per-example Python control flow: a trace (TorchScript, ONNX) follows one path only."""

    def __init__(self, input_shape, output_size, hidden=16):
        super().__init__()
        n = 1
        for d in input_shape:
            n *= d
        self.a = nn.Sequential(nn.Linear(n, hidden), nn.ReLU(), nn.Linear(hidden, output_size))
        self.b = nn.Sequential(nn.Linear(n, hidden), nn.Tanh(), nn.Linear(hidden, output_size))

    def forward(self, x):
        x = x.flatten(1)
        return torch.stack([self.a(r) if r.sum() > 0 else self.b(r) for r in x])


def folded(input_shape, output_size, width=8):
    """Folds channels into a spatial axis: torch-pruning cannot follow the coupling."""
    return Folded(input_shape, output_size, width)


class Folded(nn.Module):
    def __init__(self, input_shape, output_size, width):
        super().__init__()
        c, h, w = input_shape
        self.width, self.hw = width, h * w
        self.conv = nn.Conv2d(c, width, 3, padding=1)
        self.fc = nn.Linear(width * h * w // 16, output_size)

    def forward(self, x):
        h = torch.relu(self.conv(x)).view(x.shape[0], self.width, self.hw // 16, 16).mean(-1)
        return self.fc(h.flatten(1))


def flaky(input_shape, output_size, width=8):
    """Raises for one of the configurations the spec allows."""
    if width == 13:
        raise ValueError("width 13 is not supported by this layer")
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(width), nn.ReLU(),
                         nn.Linear(width, output_size))


def no_onnx(input_shape, output_size, hidden=16):
    """Uses an operator that has no ONNX translation (a singular-value feature)."""
    return NoOnnx(input_shape, output_size, hidden)


class NoOnnx(nn.Module):
    def __init__(self, input_shape, output_size, hidden):
        super().__init__()
        self.fc1 = nn.Linear(int(torch.tensor(input_shape).prod()), hidden)
        self.fc2 = nn.Linear(hidden, output_size)

    def forward(self, x):
        h = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(h + 0 * torch.linalg.svdvals(h.unsqueeze(-1)))
'''

TINY = """
name: {name}
data: {{source: digits}}
model:
  family: "{family}"
  "{family}": {section}
training: {{optimizer: adam, lr: 0.01, batch_size: 128, epochs: 2}}
search: {{num_samples: {n}, seed: 0, sampler: random{search}}}
scheduler: {{type: none}}
selection: {{top_k: 1, cv_folds: 2}}
compression:
  stages: [{{stage: prune, pruning_ratio: 0.3, max_accuracy_drop: 1.0}}]
  latency_repeats: 3
tracking: {{backend: none}}
"""


def _env() -> dict[str, str]:
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled"}


# --------------------------------------------------------------------------- the example
@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``examples/user_model`` copied to a fresh folder and run with the CLI from another
    working directory (the module is found from the spec's folder; Ray's workers import it
    through the runtime environment)."""
    tmp = tmp_path_factory.mktemp("example")
    copy = tmp / "user_model"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "runs"))
    (tmp / "cwd").mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "automl", "search", str(copy / "spec.yaml"),
                           "--output", str(tmp / "runs"), "--dashboard-port", "0"],
                          cwd=tmp / "cwd", env=_env(), capture_output=True, text=True,
                          timeout=600)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return copy, tmp / "runs" / "user-model", proc.stdout, wall


def test_example_runs_end_to_end_and_names_the_users_family(example):
    copy, run_dir, out, wall = example
    summary = json.loads((run_dir / "summary.json").read_text())
    families = {t["params"]["model.family"] for t in json.loads((run_dir / "trials.json")
                                                                 .read_text())}
    assert families == {"mynets:small_cnn", "mlp"}  # mixed with a zoo family
    assert summary["winner"]["config"]["arch"]["family"] == "mynets:small_cnn", wall
    assert summary["trials"]["failed"] == 0 and summary["compression"]["status"] == "completed"
    record = json.loads((run_dir / "user_models.json").read_text())["mynets:small_cnn"]
    assert record["root"] == str(copy) and record["shipped"] == str(copy / "mynets")
    assert record["version"] == "0.1.0" and len(record["sha256"]) == 64
    assert f"model  mynets:small_cnn from {copy / 'mynets'} (version 0.1.0" in out
    spec = (run_dir / "spec.yaml").read_text()  # the resolved spec keeps the user's layout
    assert load_spec(run_dir / "spec.yaml").model.user_families() == ["mynets:small_cnn"]
    assert "mynets:small_cnn:\n    channels:" in spec and "user_sections" not in spec
    # the winner is exported both ways, checked in ONNX Runtime
    row = next(r for r in summary["compression"]["table"] if r["name"] == "winner")
    assert row["onnx_max_abs_diff"] < 1e-4 and row["onnx_skipped"] is None
    assert (run_dir / "compression" / "winner.ts").is_file()


def test_the_example_model_card_records_the_code_and_its_snippet_runs(example, tmp_path):
    from automl.card import extract_snippet
    from automl.registry import Registry

    copy, run_dir, _, _ = example
    reg = Registry(run_dir.parent / "registry")
    version = reg.get("user-model@1")
    code = version.lineage["user_models"][0]
    assert code["import_path"] == "mynets:small_cnn" and code["version"] == "0.1.0"
    card = version.card.read_text()
    assert "(mynets:small_cnn)" in card.splitlines()[2]
    assert f"model code `mynets:small_cnn` | version 0.1.0, source sha256 `{code['sha256']}`" \
        in card
    snippet = extract_snippet(card)
    assert f"sys.path.insert(0, {str(copy)!r})" in snippet
    assert "from mynets import small_cnn" in snippet
    path = tmp_path / "load.py"
    path.write_text(snippet)
    out = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert [ln.split(" ", 1)[0] for ln in out.stdout.splitlines()] == \
        ["pytorch", "torchscript", "onnx"]


def test_reproduce_and_report_of_the_example(example):
    _, run_dir, _, _ = example
    result = CliRunner().invoke(app, ["reproduce", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "weights identical to best/model.pt" in result.output
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (run_dir / "report" / "index.html").is_file() and "not drawn" not in result.output


def test_a_changed_module_is_named(example):
    """The record keeps the module's sha256: an edit since the run is a difference that
    ``automl reproduce`` lists and a resumed run or ``automl compress`` warns about."""
    from automl.models.user import UserModule, use_record

    _, run_dir, _, _ = example
    rec = UserModule.from_dict(json.loads((run_dir / "user_models.json").read_text())
                               ["mynets:small_cnn"])
    assert use_record({rec.import_path: rec}) == []
    altered = UserModule(**{**rec.to_dict(), "sha256": "0" * 64})
    assert use_record({rec.import_path: altered}) == [
        f"{rec.import_path}'s source changed since the run (sha256 {rec.sha256[:12]} vs "
        "000000000000 recorded)"]


def test_warm_start_from_a_run_of_the_users_model(example, tmp_path):
    """Nightly warm start copies the previous study's trials: parameter names with the
    import path in them replay into the new space."""
    from automl.nightly import seed_study

    copy, run_dir, _, _ = example
    exp = load_spec(copy / "spec.yaml", {"name": "user-model-next"})
    new = tmp_path / "next"
    new.mkdir()
    warm = seed_study(exp, new, str(run_dir), tmp_path / "registry")
    assert warm["status"] == "seeded" and warm["history_trials"] == 6, warm
    assert warm["enqueued"][0]["model.family"] == "mynets:small_cnn"
    assert "model.mynets:small_cnn.channels" in warm["enqueued"][0]


def test_compress_registry_and_resume_import_the_recorded_code_from_anywhere(example,
                                                                             tmp_path):
    """Fresh interpreters in another folder, with nothing on ``sys.path``: the registry
    loads the model, ``automl compress`` reruns the chain and ``automl resume`` finishes an
    unfinished run, each importing ``mynets`` from where the run recorded it."""
    _, run_dir, _, _ = example
    code = ("from automl.registry import Registry\n"
            f"model, v = Registry({str(run_dir.parent / 'registry')!r}).load('user-model@1')\n"
            "import sys, torch\n"
            "print(type(model).__name__, 'mynets' in sys.modules, "
            "model(torch.zeros(2, 1, 8, 8)).shape)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, env=_env())
    assert out.stdout.strip() == "Sequential True torch.Size([2, 10])", out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "automl", "compress", str(run_dir)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    # the chain ran on the user's model (pruned and judged: under load, its latency guard
    # may reject the step, which is still a run of the recorded code)
    assert "#1 prune: " in out.stdout and "warning" not in out.stdout
    (run_dir / "summary.json").unlink()  # as if the driver died before publishing
    (run_dir / "stages" / "publish.json").unlink()
    out = subprocess.run([sys.executable, "-m", "automl", "resume", str(run_dir),
                          "--dashboard-port", "0"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env=_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "resume stage compression finished before" in out.stdout
    assert json.loads((run_dir / "summary.json").read_text())["winner"]["config"]["arch"][
        "family"] == "mynets:small_cnn"


# --------------------------------------------------------------------------- awkward models
@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    """The awkward package in a folder of its own, and a local Ray whose runtime environment
    carries it (``py_modules``), as ``automl search`` starts one for such a spec."""
    import ray

    from automl import cluster
    from automl.models.user import add_to_path

    root = tmp_path_factory.mktemp("awkward")
    (root / AWKWARD).mkdir()
    (root / AWKWARD / "__init__.py").write_text(AWKWARD_SRC)
    add_to_path([root])
    if ray.is_initialized():
        ray.shutdown()
    handle = cluster.connect(num_cpus=2, object_store_mb=200, dashboard_port=0,
                             py_modules=[str(root / AWKWARD)])
    yield root
    cluster.shutdown(handle)
    sys.modules.pop(AWKWARD, None)


def _main_job(root: Path, tmp: Path, name: str, family: str, section: str = "{}",
              n: int = 1, search: str = ""):
    from automl.pipeline import choose_run_dir, run_main_job

    spec = write_spec(root, TINY.format(name=name, family=f"{AWKWARD}:{family}",
                                        section=section, n=n, search=search),
                      f"{name}.yaml")
    exp = load_spec(spec)
    run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
    buf = StringIO()
    summary = run_main_job(exp, run_dir, console=Console(file=buf, width=200))
    return run_dir, summary, buf.getvalue()


def test_a_model_onnx_cannot_follow_finishes_the_main_job(awkward, tmp_path):
    """Per-example Python control flow: the TorchScript trace and the ONNX file would follow
    one path only; each is skipped with one line, and the job and its card work without."""
    from automl.card import extract_snippet
    from automl.registry import Registry

    run_dir, summary, out = _main_job(awkward, tmp_path, "branchy", "Branchy", "{hidden: 16}")
    comp = summary["compression"]
    assert comp["status"] == "completed", comp
    teacher = next(r for r in comp["table"] if r["name"] == "00_teacher")
    assert teacher["onnx_skipped"].startswith("ONNX Runtime cannot run the exported file (the "
                                              "export does not follow this model)") or \
        "the export does not follow this model" in teacher["onnx_skipped"], teacher
    assert comp["teacher_export"]["script_skipped"].startswith(
        "the TorchScript trace does not follow this model")
    assert comp["teacher_export"]["checked_with"] == "state_dict"
    assert not list((run_dir / "compression").glob("*.onnx"))
    chain = json.loads((run_dir / "compression" / "chain.json").read_text())
    assert chain["teacher_onnx"]["skipped"] == teacher["onnx_skipped"]
    skips = [ln for ln in out.splitlines() if "no ONNX file" in ln]
    assert len(skips) >= 2 and all("the export does not follow this model" in ln
                                   for ln in skips), out
    assert "Torch IR graph" not in out
    version = Registry(run_dir.parent / "registry").get("branchy@1")
    assert set(version.files) == {"model.pt", "MODEL_CARD.md"}
    card = version.card.read_text()
    assert "No TorchScript file: the TorchScript trace does not follow this model" in card
    path = tmp_path / "load.py"
    path.write_text(extract_snippet(card))
    res = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, env=_env())
    assert res.returncode == 0 and res.stdout.startswith("pytorch ["), res.stderr[-2000:]


def test_a_model_torch_pruning_cannot_follow_finishes_the_main_job(awkward, tmp_path):
    run_dir, summary, out = _main_job(awkward, tmp_path, "folded", "folded", "{width: 8}")
    (stage,) = summary["compression"]["stages"]
    assert stage["status"] == "skipped"
    assert stage["reason"].startswith("torch-pruning cannot prune this model structurally: "), \
        stage
    lines = [ln for ln in out.splitlines() if "#1 prune" in ln]
    assert lines == [f"  #1 prune: skipped: {stage['reason']}"], out
    chain = json.loads((run_dir / "compression" / "chain.json").read_text())
    assert chain["stages"][0]["reason"] == stage["reason"]
    assert summary["compression"]["final_name"] == "00_teacher"
    assert summary["winner"]["config"]["arch"] == {"family": f"{AWKWARD}:folded", "width": 8}


def test_a_factory_that_raises_fails_its_trial_only(awkward, tmp_path):
    """A configuration the factory refuses fails that trial, with the traceback in the
    trial's log (``trials.jsonl``); the others run and the job finishes."""
    run_dir, summary, _ = _main_job(
        awkward, tmp_path, "flaky", "flaky",
        "{width: {type: categorical, choices: [8, 13]}}", n=4)
    ends = [json.loads(ln) for ln in (run_dir / "trials.jsonl").read_text().splitlines()]
    ends = {e["trial_id"]: e for e in ends if e.get("event") == "end"}
    params = {t["trial_id"]: t["params"] for t in json.loads((run_dir / "trials.json")
                                                            .read_text())}
    failed = [t for t, e in ends.items() if e["state"] == "failed"]
    assert failed and len(failed) < len(ends), ends
    for t in failed:
        assert params[t]["model.i41_awkward:flaky.width"] == 13
        error = ends[t]["error"]
        assert f'{AWKWARD}/__init__.py", line' in error and "in flaky" in error  # traceback
        assert "ValueError: width 13 is not supported by this layer" in error
        assert "width 13 is not supported" in ends[t]["reason"]
    assert summary["trials"]["failed"] == len(failed)
    assert summary["winner"]["config"]["arch"]["width"] == 8


def test_fail_fast_stops_the_sweep_at_the_factory_that_raises(awkward, tmp_path):
    from automl.errors import RunError

    with pytest.raises(RunError):
        _main_job(awkward, tmp_path, "flakyfast", "flaky",
                  "{width: {type: categorical, choices: [13, 8]}}", n=4,
                  search=", fail_fast: true")
    ends = [json.loads(ln) for ln in (tmp_path / "runs" / "flakyfast" / "trials.jsonl")
            .read_text().splitlines() if '"end"' in ln]
    assert any(e["state"] == "failed" for e in ends)
    assert len(ends) < 4


def test_an_operator_without_onnx_translation_is_one_line(capfd, tmp_path):
    """The TorchScript-based exporter prints the whole graph to the C-level stdout when it
    fails; the reason stays one line naming the operator, and the graph stays off."""
    import numpy as np

    from automl.compress._base import make_context
    from automl.compress.onnx_export import export_checked
    from automl.models.user import add_to_path

    (tmp_path / "noonnx_i41").mkdir()
    (tmp_path / "noonnx_i41" / "__init__.py").write_text(AWKWARD_SRC)
    add_to_path([tmp_path])
    try:
        from noonnx_i41 import no_onnx

        rng = np.random.default_rng(0)
        X, y = rng.normal(size=(60, 1, 8, 8)).astype("float32"), rng.integers(0, 10, 60)
        ctx = make_context((X[:20], y[:20]), (X[20:40], y[20:40]), (X[40:], y[40:]), tmp_path)
        print("before")
        res = export_checked(no_onnx((1, 8, 8), 10).eval(), ctx, "m")
        print("after")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("noonnx_i41", None)
    assert res.path is None and res.skipped == (
        "ONNX export failed: UnsupportedOperatorError: Exporting the operator "
        "'aten::linalg_svdvals' to ONNX opset version 18 is not supported")
    out = capfd.readouterr().out
    assert "before\n" in out and "after\n" in out and "Torch IR graph" not in out


# --------------------------------------------------------------------------- units
def test_user_sections_round_trip_and_build_with_init(tmp_path, monkeypatch):
    """The space names ``model.<import path>.<key>``; ``TrialConfig`` splits them back; the
    model is built by the factory and ``training.init`` still applies."""
    from automl.models import build_model, family_params, model_size_key
    from automl.space import TrialConfig, define_by_run, describe, flat_config

    monkeypatch.syspath_prepend(str(EXAMPLE))
    exp = load_spec(EXAMPLE / "spec.yaml")
    assert exp.model.branch("mynets:small_cnn")["channels"].choices == [8, 16]
    info = describe(exp)
    assert "model.mynets:small_cnn.dropout" in [p["name"] for p in info["parameters"]]
    params = {"model.family": "mynets:small_cnn", "model.mynets:small_cnn.channels": 16,
              "model.mynets:small_cnn.hidden": 32, "model.mynets:small_cnn.dropout": 0.1,
              "training.lr": 0.01}
    flat = flat_config(exp, params)
    cfg = TrialConfig.from_flat(flat, exp)
    assert cfg.arch == {"family": "mynets:small_cnn", "channels": 16, "hidden": 32,
                        "dropout": 0.1}
    assert callable(define_by_run(exp))
    torch.manual_seed(0)
    default = build_model(cfg.arch, (1, 8, 8), 10)
    torch.manual_seed(0)
    xavier = build_model(cfg.arch, (1, 8, 8), 10, init="xavier")
    assert default(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    assert not torch.equal(default[0].weight, xavier[0].weight)
    assert torch.count_nonzero(xavier[0].bias) == 0  # init zeroes biases
    assert model_size_key(cfg.arch, (1, 8, 8), 10) == sum(p.numel() for p in default.parameters())
    assert set(family_params("mynets:small_cnn")) == {"channels", "hidden", "dropout"}


def test_user_families_fit_every_kind_of_data_and_students_stay_zoo(tmp_path):
    from automl.errors import SpecError

    for source in ("wine", "mnist1d"):  # tabular, 1D signals: the user's to say
        exp = load_spec(write_spec(tmp_path, f"data: {{source: {source}}}\n"
                                             "model: {family: 'pkg.nets:build'}\n"))
        assert exp.model.user_families() == ["pkg.nets:build"]
    with pytest.raises(SpecError, match=r"compression\.stages\.0\.student\.family"):
        load_spec(write_spec(tmp_path, "compression:\n  stages:\n    - {stage: distill, "
                                       "student: {family: 'pkg.nets:build'}}\n"))


def test_specs_without_a_user_family_are_written_as_before(tmp_path):
    """No user family: the resolved spec (and so its sha256) has no new key."""
    exp = load_spec(REPO / "search_spaces" / "resnet.yaml")
    assert "user_sections" not in exp.to_dict()["model"]
    assert list(exp.to_dict()["model"]) == ["family", "resnet", "vgg", "mlp", "vit",
                                            "resnet1d", "tcn", "transformer1d"]
