"""The file-based model registry: versions, aliases, lineage, atomic writes, safe loading,
registration of a run's winner and compressed models, and the CLI. No Ray."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from automl.cli import app
from automl.errors import RegistryError
from automl.publish import publish, register_run
from automl.registry import CHECKPOINT, EXPORT, Registry, now
from automl.space import TrialConfig
from automl.spec import Experiment
from automl.train import TrainState

ARCH = {"family": "resnet", "width": 8, "depth": 1, "stages": 2}


def checkpoint(path: Path, seed: int = 0) -> torch.nn.Module:
    cfg = TrialConfig(arch=dict(ARCH), optimizer="adam", lr=1e-3, batch_size=32, epochs=1,
                      weight_decay=0.0, init="kaiming", seed=seed)
    state = TrainState.create(cfg, (1, 8, 8), 10, n_train=64)
    torch.save(state.checkpoint({"val_accuracy": 0.5}), path)
    return state.model.eval()


@pytest.fixture
def reg(tmp_path) -> Registry:
    return Registry(tmp_path / "registry")


def test_versions_aliases_and_safe_loading(reg, tmp_path):
    models = [checkpoint(tmp_path / f"m{i}.pt", seed=i) for i in range(2)]
    v1 = reg.register("digits", {"model.pt": tmp_path / "m0.pt"}, format=CHECKPOINT,
                      lineage={"trial_id": "a_00000"})
    v2 = reg.register("digits", {"model.pt": tmp_path / "m1.pt"}, format=CHECKPOINT,
                      lineage={"trial_id": "a_00001", "parent": "digits@1"})
    assert (v1.ref, v2.ref) == ("digits@1", "digits@2") and reg.names() == ["digits"]
    assert reg.get("digits").version == reg.get("digits@latest").version == 2
    assert reg.get("digits@1").lineage["trial_id"] == "a_00000"
    assert v2.lineage["registered_at"].endswith("Z")
    assert reg.set_alias("digits@1", "champion").aliases == ("champion",)
    assert reg.get("digits@champion").version == 1
    reg.set_alias("digits@2", "champion")  # an alias moves; it is never on two versions
    assert reg.get("digits@1").aliases == () and reg.get("digits@champion").version == 2
    x = torch.rand(4, 1, 8, 8)
    for ref, model in (("digits@1", models[0]), ("digits@champion", models[1])):
        loaded, version = reg.load(ref)
        assert not loaded.training and torch.equal(loaded(x), model(x))
    assert json.loads((v2.path / "version.json").read_text())["files"]["model.pt"] == \
        v2.files["model.pt"]


def test_bad_names_references_and_aliases_are_one_line_errors(reg, tmp_path):
    checkpoint(tmp_path / "m.pt")
    for name in ("../evil", "a/b", "..", "", "a..b", ".hidden"):
        with pytest.raises(RegistryError, match="invalid model name"):
            reg.register(name, {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT, lineage={})
    with pytest.raises(RegistryError, match="invalid file name"):
        reg.register("m", {"../x.pt": tmp_path / "m.pt"}, format=CHECKPOINT, lineage={})
    with pytest.raises(RegistryError, match="does not exist"):
        reg.register("m", {"model.pt": tmp_path / "nope.pt"}, format=CHECKPOINT, lineage={})
    reg.register("m", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT, lineage={})
    with pytest.raises(RegistryError, match=r"m has no version 7 \(versions 1..1\)"):
        reg.get("m@7")
    with pytest.raises(RegistryError, match="m has no alias 'prod' .aliases: none"):
        reg.get("m@prod")
    with pytest.raises(RegistryError, match="no model named 'ghost' .registered: m"):
        reg.get("ghost")
    for alias in ("latest", "1st", "a/b", ""):
        with pytest.raises(RegistryError, match="invalid alias"):
            reg.set_alias("m@1", alias)
    assert "\n" not in str(RegistryError("x", where="m@1"))


def test_a_failed_registration_leaves_no_version(reg, tmp_path, monkeypatch):
    checkpoint(tmp_path / "m.pt")
    (tmp_path / "extra.json").write_text("{}")
    real = shutil.copyfile
    calls = []

    def flaky(src, dst, *a, **kw):
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(shutil, "copyfile", flaky)
    with pytest.raises(OSError, match="No space"):
        reg.register("m", {"model.pt": tmp_path / "m.pt", "extra.json": tmp_path / "extra.json"},
                     format=CHECKPOINT, lineage={})
    monkeypatch.setattr(shutil, "copyfile", real)
    assert reg.names() == [] and [p.name for p in (reg.root / "m").iterdir()] == [".lock"]
    assert reg.register("m", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT,
                        lineage={}).version == 1


def test_concurrent_registrations_get_distinct_versions(reg, tmp_path):
    for i in range(8):
        (tmp_path / f"m{i}.pt").write_bytes(f"weights {i}".encode())
    with ThreadPoolExecutor(4) as pool:
        refs = list(pool.map(lambda i: reg.register(
            "m", {"model.pt": tmp_path / f"m{i}.pt"}, format=CHECKPOINT,
            lineage={"i": i}).version, range(8)))
    assert sorted(refs) == list(range(1, 9))
    assert sorted(v.lineage["i"] for v in reg.versions("m")) == list(range(8))
    # the same files at once: one version, the others get it back unchanged
    with ThreadPoolExecutor(4) as pool:
        same = list(pool.map(lambda i: reg.register(
            "n", {"model.pt": tmp_path / "m0.pt"}, format=CHECKPOINT, lineage={}), range(4)))
    assert {v.ref for v in same} == {"n@1"} and sum(not v.unchanged for v in same) == 1


def test_registering_the_same_files_again_returns_that_version(reg, tmp_path):
    checkpoint(tmp_path / "m.pt")
    checkpoint(tmp_path / "other.pt", seed=1)

    def card(name, number, folder):  # the card differs each time; it is not the model
        return f"# {name}@{number} registered at {now()} ({folder.name})"

    first = reg.register("m", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT,
                         lineage={"try": 1}, card=card)
    again = reg.register("m", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT,
                         lineage={"try": 2}, card=card)
    assert (first.unchanged, again.unchanged) == (False, True)  # issue 45 item 8
    assert again.ref == "m@1" and again.lineage["try"] == 1 and len(reg.versions("m")) == 1
    assert "unchanged" not in again.to_dict()
    other = reg.register("m", {"model.pt": tmp_path / "other.pt"}, format=CHECKPOINT,
                         lineage={})
    assert other.ref == "m@2" and not other.unchanged
    # a file more or less is other content: a new version
    extra = reg.register("m", {"model.pt": tmp_path / "m.pt", "x.json": tmp_path / "other.pt"},
                         format=CHECKPOINT, lineage={})
    assert extra.ref == "m@3"
    assert reg.register("m", {"model.pt": tmp_path / "other.pt"}, format=CHECKPOINT,
                        lineage={}).ref == "m@2"  # any version, not only the latest


def _registered_run(reg, tmp_path):
    """``fake_run`` with a compression chain whose winner is registered, as ``automl compress``
    finds it: spec.yaml and summary.json (with its ``registry`` section) in the run dir."""
    import yaml

    run_dir, summary, model = fake_run(tmp_path, with_compression=True)
    exp = Experiment.model_validate({"name": "digits", "tracking": {"backend": "none"},
                                     "registry": {"dir": str(reg.root)}})
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(exp.to_dict(), sort_keys=False))
    win = reg.register("digits", {"model.pt": run_dir / "best" / "model.pt"},
                       format=CHECKPOINT, lineage={"kind": "winner", "test": summary["test"]})
    summary["registry"] = {"dir": str(reg.root), "winner": win.ref, "versions": [win.ref]}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir, summary


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_registering_a_runs_compressed_models_again_registers_nothing(reg, tmp_path):
    from automl.publish import register_recompressed

    run_dir, _ = _registered_run(reg, tmp_path)
    console = Console(record=True, width=200)
    first = register_recompressed(run_dir, console)
    assert [v.ref for v in first] == ["digits-01_distill@1"]
    again = register_recompressed(run_dir, console)  # `automl compress` gave the same files
    assert again == [] and [v.ref for v in reg.versions("digits-01_distill")] == [
        "digits-01_distill@1"]
    text = console.export_text()
    assert ("registry digits-01_distill@1 unchanged (same sha256); not registered again"
            in text) and text.count("registry digits-01_distill@1 in") == 1
    assert json.loads((run_dir / "summary.json").read_text())["registry"]["versions"] == [
        "digits@1", "digits-01_distill@1"]


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_registry_list_says_what_each_test_figure_was_measured_on(reg, tmp_path):
    from automl.publish import register_compressed

    run_dir, summary = _registered_run(reg, tmp_path)
    exp = Experiment.model_validate({"name": "digits"})
    register_compressed(reg, exp, run_dir, summary, reg.get("digits@1"))
    reg.register("old-01_prune", {"model.pt": run_dir / "best" / "model.pt"},  # before issue 45
                 format=CHECKPOINT, lineage={"kind": "compressed", "test": {"accuracy": 0.97}})
    res = CliRunner().invoke(app, ["registry", "list", "--dir", str(reg.root)])
    assert res.exit_code == 0, res.output
    rows = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.strip()}
    win, child, old = rows["digits"], rows["digits-01_distill"], rows["old-01_prune"]
    # issue 45 item 7: the winner's refit saw the validation rows, the compressed model's
    # teacher did not; the compressed model's figure sits beside its teacher's
    assert "0.9500" in win and "train + validation rows (refit)" in win
    assert re.search(r"0\.9400\s+0\.9500\s+train rows \(compressed from the chain's teacher\)",
                     child), child
    assert "0.9700" in old and "train rows (compressed from the chain's teacher)" in old
    assert "compare a compressed model with its teacher, not with the winner" in " ".join(
        res.output.split())


def test_tampered_or_pickled_code_files_are_refused(reg, tmp_path):
    checkpoint(tmp_path / "m.pt")
    v = reg.register("m", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT, lineage={})
    (v.path / "model.pt").write_bytes(b"changed")
    with pytest.raises(RegistryError, match="sha256 mismatch"):
        reg.load("m@1")
    torch.save({"format": "automl.checkpoint/1", "evil": shutil.rmtree}, tmp_path / "bad.pt")
    reg.register("bad", {"model.pt": tmp_path / "bad.pt"}, format=CHECKPOINT, lineage={})
    with pytest.raises(RegistryError, match="refused to load"):
        reg.load("bad")


def fake_run(tmp_path: Path, with_compression: bool) -> tuple[Path, dict, torch.nn.Module]:
    """A run directory as the pipeline leaves it (summary, data, best model) and,
    optionally, a compression chain with one exported model."""
    run_dir = tmp_path / "runs" / "nightly-3"
    (run_dir / "best").mkdir(parents=True)
    model = checkpoint(run_dir / "best" / "model.pt")
    cv = {"metric": "accuracy", "winner": "t_00002", "candidates": [
        {"trial_id": "t_00002", "status": "winner", "n_params": 100,
         "folds": [{"fold": 1, "scores": {"accuracy": 0.9}}, {"fold": 2,
                                                              "scores": {"accuracy": 0.8}}],
         "summary": {"accuracy": {"mean": 0.85, "std": 0.07}}}]}
    summary = {"name": "digits", "spec_sha256": "ab" * 32, "metric": "val_accuracy",
               "data": {"sha256": "cd" * 32},
               "best": {"trial_id": "t_00001", "params": {"training.lr": 0.1}, "val": {}},
               "winner": {"trial_id": "t_00002", "params": {"training.lr": 0.01},
                          "config": {"arch": ARCH},
                          "checkpoint": str(run_dir / "best" / "model.pt")},
               "cv": cv, "test": {"accuracy": 0.95},
               "search": {"rungs": {"rungs": [1, 3, 9], "brackets": 2, "adaptive": True,
                                    "start_epoch": 3, "narrowed": True}}}
    if with_compression:
        from automl.compress import export_model

        out = run_dir / "compress"
        recipe = {"arch": ARCH, "input_shape": [1, 8, 8], "num_classes": 10, "shapes": {},
                  "pruned": None, "quantized": None, "lineage": ["teacher", "01_distill"]}
        exp = export_model(model, out, "01_distill", recipe, torch.rand(8, 1, 8, 8))
        meas = {"name": "01_distill", "params": 100, "nonzero_params": 100, "macs": 10,
                "size_bytes": 1, "latency_ms_b1": 0.1, "latency_ms_b64": 1.0,
                "accuracy": 0.94, "agreement": 0.99}
        chain = {"teacher": {**meas, "name": "00_teacher", "accuracy": 0.95},
                 "stages": [{"index": 1, "stage": "distill", "status": "accepted",
                             "accuracy": 0.94, "accuracy_drop": 0.01, "measurement": meas,
                             "export": exp.to_dict()},
                            {"index": 2, "stage": "prune", "status": "rejected",
                             "reason": "accuracy drop 0.2 > max 0.01"}],
                 "final_name": "01_distill"}
        (out / "chain.json").write_text(json.dumps(chain))
    return run_dir, summary, model


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_register_run_records_lineage_of_winner_and_compressed_models(reg, tmp_path):
    run_dir, summary, model = fake_run(tmp_path, with_compression=True)
    (run_dir / "trials.json").write_text(json.dumps([  # CV chose t_00002, not the search's best
        {"trial_id": "t_00001", "metrics": {"val_accuracy": 0.99}},
        {"trial_id": "t_00002", "metrics": {"val_accuracy": 0.97}}]))
    exp = Experiment.model_validate({"name": "digits"})
    win, child = register_run(reg, exp, run_dir, summary)
    assert (win.ref, child.ref) == ("digits@1", "digits-01_distill@1")
    lin = win.lineage
    assert (lin["spec_sha256"], lin["data_sha256"], lin["trial_id"], lin["sweep"]) == (
        "ab" * 32, "cd" * 32, "t_00002", "nightly-3")
    assert lin["params"] == {"training.lr": 0.01}
    assert lin["search_val"] == {"val_accuracy": 0.97}  # its own, from trials.json
    assert lin["cv"] == {"metric": "accuracy", "scores": [0.9, 0.8], "mean": 0.85, "std": 0.07}
    assert lin["parent"] is None and lin["compression"] == []
    c = child.lineage
    assert child.format == EXPORT and c["parent"] == "digits@1"
    assert c["compression"] == ["teacher", "01_distill"]
    assert c["test"] == {"accuracy": 0.94, "split": "test", "teacher_accuracy": 0.95,
                         "trained_on": "train rows (compressed from the chain's teacher)"}
    assert lin["test"]["trained_on"] == "train + validation rows (refit)"
    loaded, _ = reg.load("digits-01_distill")
    x = torch.rand(3, 1, 8, 8)
    assert torch.allclose(loaded(x), model(x))
    # the winner travels as checkpoint, TorchScript and ONNX, each version with its card
    assert set(win.files) == {"model.pt", "model.ts", "model.onnx", "MODEL_CARD.md"}
    assert (run_dir / "best" / "model.onnx").is_file()  # exported at registration
    scripted = torch.jit.load(str(win.path / "model.ts"))
    assert torch.allclose(scripted(x), model(x), atol=1e-5)
    for v in (win, child):
        assert v.card == v.path / "MODEL_CARD.md" and v.to_dict()["card"] == str(v.card)
        assert f"# {v.ref}" in v.card.read_text() and "```python" in v.card.read_text()
    assert "digits-01_distill@1" in child.card.read_text() and "digits@1" in child.card.read_text()
    # the search section says how the rung policy ran and where its brackets ended up
    assert ("2 bracket(s), rank cutoff, rungs at epochs 1, 3, 9, one bracket starting at epoch 3"
            in win.card.read_text())


def test_publish_without_wandb_or_optional_stages(reg, tmp_path):
    run_dir, summary, _ = fake_run(tmp_path, with_compression=False)
    del summary["cv"], summary["winner"]
    summary["best"]["checkpoint"] = str(run_dir / "best" / "model.pt")
    exp = Experiment.model_validate({"name": "digits", "tracking": {"backend": "none"},
                                     "registry": {"dir": str(reg.root), "name": "nightly"}})
    out = publish(exp, run_dir, summary, None, Console(quiet=True))
    assert out["registry"]["versions"] == ["nightly@1"]
    assert out["tracking"] == {"backend": "none",
                               "tensorboard": f"tensorboard --logdir {run_dir / 'tensorboard'}"}
    v = reg.get("nightly@1")
    assert v.lineage["trial_id"] == "t_00001" and v.lineage["cv"] is None
    assert v.tracking is None


def test_registry_cli(reg, tmp_path):
    for seed in range(2):
        checkpoint(tmp_path / "m.pt", seed=seed)
        reg.register("digits", {"model.pt": tmp_path / "m.pt"}, format=CHECKPOINT,
                     lineage={"kind": "winner", "test": {"accuracy": 0.9}})
    run = CliRunner().invoke
    d = ["--dir", str(reg.root)]
    res = run(app, ["registry", "promote", "digits@1", "--alias", "champion", *d])
    assert res.exit_code == 0 and "digits@1 is now digits@champion" in res.output
    reg.register("digits-01_distill-and-a-long-name", {"model.pt": tmp_path / "m.pt"},
                 format=CHECKPOINT, lineage={"kind": "compressed"})
    res = run(app, ["registry", "list", *d])
    assert res.exit_code == 0 and "champion->1" in res.output and "0.9000" in res.output
    # piped output keeps whole names and times on one row each (not cut at 80 columns)
    row = next(ln for ln in res.output.splitlines() if "long-name" in ln)
    assert "digits-01_distill-and-a-long-name" in row and "compressed" in row
    assert re.search(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d", row), row
    res = run(app, ["registry", "show", "digits@champion", *d])
    assert res.exit_code == 0
    shown = json.loads(res.stdout)  # the card's path goes to stderr
    assert (shown["version"], shown["aliases"], shown["lineage"]["kind"]) == (
        1, ["champion"], "winner")
    for args in (["show", "digits@9"], ["promote", "nope@1"], ["show", "../x"]):
        res = run(app, ["registry", *args, *d])
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
