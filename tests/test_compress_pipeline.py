"""Compression wired into the product: the spec section, the main job's compression
step (a tiny real sweep) and ``automl compress RUN_DIR``."""

from __future__ import annotations

import inspect
import json
import os
import shutil

import pytest
import torch
import yaml
from conftest import REPO, write_spec
from rich.console import Console
from typer.testing import CliRunner

import automl.compress as comp
from automl.cli import app
from automl.compress import job
from automl.data import fit_transform, load_dataset, split_indices
from automl.errors import RunError, SpecError
from automl.pipeline import choose_run_dir, run_main_job
from automl.registry import CHECKPOINT, Registry
from automl.space import TrialConfig
from automl.spec import load_spec
from automl.train import TrainState, fit, to_tensors

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CHAIN = """
compression:
  latency_repeats: 3
  max_slowdown: null  # int8 of these tiny nets is slower at batch 1
  stages:
    - {stage: prune, pruning_ratio: 0.75, max_accuracy_drop: 0.0}
    - {stage: distill, student: {family: resnet, width: 4, stages: 2}, epochs: 2, lr: 0.005,
       max_accuracy_drop: 1.0}
    - {stage: quantize, method: static, calibration_batches: 2, max_accuracy_drop: 1.0}
"""
TINY = """
name: tinyc
model:
  family: resnet
  resnet: {depth: 1, width: 8, stages: 2}
training:
  optimizer: adam
  lr: {type: float, low: 3e-3, high: 1e-2, log: true}
  batch_size: 128
  epochs: 3
search: {num_samples: 2, seed: 0, sampler: random}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
resources: {cpus_per_worker: 1}
tracking: {backend: none, tensorboard: false}
""" + CHAIN
TABLE_KEYS = {"name", "role", "params", "nonzero_params", "macs", "size_bytes", "latency_ms_b1",
              "latency_ms_b64", "val_accuracy", "test_accuracy", "cv_accuracy", "agreement",
              *job.ONNX_KEYS}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: more threads only thrash
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- the spec section
def test_chain_section_validates_and_feeds_the_library(tmp_path):
    exp = load_spec(write_spec(tmp_path, CHAIN))
    assert exp.compression.enabled and [s.stage for s in exp.compression.stages] == [
        "prune", "distill", "quantize"]
    chain = exp.compression.chain()
    assert chain[1]["student"] == {"family": "resnet", "width": 4, "stages": 2}
    assert "macs_target" not in chain[0]  # unset options are left to the library defaults
    for i, stage in enumerate(chain):
        comp.make_stage(stage, i)  # every spec key is a keyword of the stage class
    # spec.yaml of a run is a full dump; it must load back to the same chain
    again = write_spec(tmp_path, yaml.safe_dump(exp.to_dict()), "dump.yaml")
    assert load_spec(again).compression == exp.compression
    assert not load_spec(write_spec(tmp_path, "name: x\n", "none.yaml")).compression.enabled


def test_spec_fields_mirror_the_stage_classes():
    from automl.spec._compression import STAGE_SPECS

    for name, spec_cls in STAGE_SPECS.items():
        keys = set(spec_cls.model_fields) - {"stage", "max_accuracy_drop"}
        assert keys == set(inspect.signature(comp.STAGES[name]).parameters), name


def test_main_spec_declares_a_distill_prune_quantize_chain():
    exp = load_spec(REPO / "search_spaces" / "resnet.yaml")
    stages = exp.compression.stages
    assert [s.stage for s in stages] == ["distill", "prune", "quantize"]
    assert stages[1].method == "structured" and stages[2].method == "static"
    assert all(0 < s.max_accuracy_drop <= 0.02 for s in stages)


@pytest.mark.parametrize("stage, where", [
    ("{stage: prune, ratio: 0.3}", r"compression\.stages\.1\.ratio: unknown key 'ratio'; "
                                   r"did you mean 'pruning_ratio'"),
    ("{stage: prune, pruning_ratio: 1.5}", r"compression\.stages\.1\.pruning_ratio: "),
    ("{stage: prune, method: unstructured, pruning_ratio: 0.5}",
     r"compression\.stages\.1\.pruning_ratio: only for structured pruning"),
    ("{stage: shrink}", r"compression\.stages\.1\.stage: unknown stage 'shrink'"),
    ("{stage: distill, student: {family: resnet, heads: 2}}",
     r"compression\.stages\.1\.student: 'heads' is not a resnet parameter"),
    ("{stage: quantize, max_accuracy_drop: 2}", r"compression\.stages\.1\.max_accuracy_drop: "),
])
def test_a_bad_stage_is_one_line_naming_its_key_path(tmp_path, stage, where):
    text = f"compression:\n  stages:\n    - {{stage: quantize}}\n    - {stage}\n"
    with pytest.raises(SpecError, match=r"spec\.yaml: " + where) as info:
        load_spec(write_spec(tmp_path, text))
    assert "\n" not in str(info.value)


def test_stage_order_and_data_kind_are_checked_before_any_work(tmp_path):
    late = "compression:\n  stages: [{stage: quantize}, {stage: prune}]\n"
    with pytest.raises(SpecError, match=r"compression\.stages\.1\.stage: prune after quantize"):
        load_spec(write_spec(tmp_path, late))
    tabular = ("data: {source: wine}\nmodel: {family: mlp}\ncompression:\n  stages:\n"
               "    - {stage: distill, student: {family: vit}}\n")
    with pytest.raises(SpecError, match=r"stages\.0\.student\.family: 'vit' needs image data"):
        load_spec(write_spec(tmp_path, tabular, "tab.yaml"))


def test_compression_step_is_off_without_stages_and_reports_a_crash(tmp_path, monkeypatch):
    quiet = Console(quiet=True)
    off = load_spec(write_spec(tmp_path, "name: x\n"))
    assert job.compress_step(off, None, None, tmp_path, cv_accuracy=None, console=quiet) is None

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(job, "compress_winner", boom)
    on = load_spec(write_spec(tmp_path, CHAIN, "on.yaml"))
    out = job.compress_step(on, None, None, tmp_path, cv_accuracy=None, console=quiet)
    assert out == {"status": "failed", "error": "RuntimeError: boom"}


# --------------------------------------------------------------------------- compression of a run
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run dir built cheaply: a tiny winner trained on train + validation rows in
    ``TrainState.checkpoint`` format, the dumped spec and a summary; then ``compress_run``."""
    run_dir = tmp_path_factory.mktemp("crun") / "tinyc"
    exp = load_spec(write_spec(run_dir.parent, TINY))
    data = load_dataset(exp.data)
    splits = split_indices(data.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    (X_pool, y_pool), (X_te, y_te) = fit_transform(data, splits.pool, splits.test)
    cfg = TrialConfig(arch={"family": "resnet", "width": 8, "stages": 2}, optimizer="adam",
                      lr=5e-3, batch_size=128, epochs=3, weight_decay=0.0, init="default")
    state = TrainState.create(cfg, X_pool.shape[1:], data.num_classes, len(y_pool))
    fit(state, to_tensors(X_pool, y_pool), None)
    (run_dir / "best").mkdir(parents=True)
    torch.save(state.checkpoint(), run_dir / "best" / "model.pt")
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(exp.to_dict(), sort_keys=False))
    summary = {"name": "tinyc", "data": data.describe(),
               "test": {"accuracy": _accuracy(state.model, X_te, y_te)},
               "winner": {"cv": {"accuracy": {"mean": 0.9}}}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    job.compress_run(run_dir, console=Console(quiet=True))
    return run_dir, json.loads((run_dir / "summary.json").read_text()), data, splits


def _accuracy(model, X, y) -> float:
    return float((comp.predict(model, torch.as_tensor(X)).argmax(1) == torch.as_tensor(y))
                 .float().mean())


def test_compression_table_in_summary(finished):
    run_dir, summary, data, splits = finished
    section = summary["compression"]
    assert section["status"] == "completed"
    assert [s["status"] for s in section["stages"]] == ["rejected", "accepted", "accepted"]
    assert "validation accuracy drop" in section["stages"][0]["reason"]
    assert section["stages"][0]["accuracy"] is None  # a rejected model is never tested
    rows = {r["name"]: r for r in section["table"]}
    # ONNX Runtime's int8 of the tiny student: QDQ nodes and scales outweigh its int8
    # weights, so its file is larger than the float one it came from, and it is rejected
    ort = section["stages"][2]["onnx_int8"]
    assert ort["status"] == "rejected" and ort["bytes"] > ort["source_bytes"]
    assert ort["reason"] == (f"its file is larger than its parent 02_distill's ("
                             f"{ort['bytes']:,} bytes against {ort['source_bytes']:,})")
    assert not (run_dir / "compression" / "03_quantize_ort.onnx").exists()
    assert list(rows) == ["winner", "00_teacher", "02_distill", "03_quantize"]
    assert all(set(r) == TABLE_KEYS for r in rows.values())
    for r in rows.values():
        assert r["params"] > 0 and r["macs"] > 0
        assert 0 <= r["test_accuracy"] <= 1 and 0 <= r["agreement"] <= 1
        if r["name"] != "03_quantize_ort":  # ONNX Runtime only: no PyTorch file or latency
            assert r["size_bytes"] > 0 and r["latency_ms_b1"] > 0 and r["latency_ms_b64"] > 0
    assert rows["winner"]["cv_accuracy"] == rows["00_teacher"]["cv_accuracy"] == 0.9
    assert rows["02_distill"]["cv_accuracy"] is None and rows["winner"]["val_accuracy"] is None
    assert rows["00_teacher"]["agreement"] == 1.0
    assert rows["02_distill"]["params"] < rows["00_teacher"]["params"]
    assert rows["03_quantize"]["size_bytes"] < rows["02_distill"]["size_bytes"]
    # the winner row is best/model.pt scored on the test rows the rebuilt split holds
    assert rows["winner"]["test_accuracy"] == pytest.approx(summary["test"]["accuracy"])


def test_every_kept_float_model_has_an_onnx_file_checked_in_onnx_runtime(finished):
    run_dir, summary, data, splits = finished
    rows = {r["name"]: r for r in summary["compression"]["table"]}
    for name in ("winner", "00_teacher", "02_distill"):
        r = rows[name]
        assert r["onnx_file"] == str(run_dir / "compression" / f"{name}.onnx"), r["onnx_skipped"]
        assert os.path.getsize(r["onnx_file"]) == r["onnx_bytes"] and r["onnx_skipped"] is None
        assert r["onnx_max_abs_diff"] < 1e-4 and r["onnx_argmax_agreement"] == 1.0
        assert r["ort_latency_ms_b1"] > 0 and r["ort_latency_ms_b64"] > 0
    assert rows["03_quantize"]["onnx_file"] is None  # int8 PyTorch: skipped with the reason
    assert "no ONNX export" in rows["03_quantize"]["onnx_skipped"]
    stage = summary["compression"]["stages"][2]["onnx_int8"]  # ONNX Runtime's int8, guarded
    assert stage["source"] == "02_distill" and stage["calibration_rows"] == 2 * 64
    assert stage["val_accuracy_drop"] <= 1.0  # passed the accuracy guard (then larger, above)


def test_guard_reads_validation_rows_and_test_is_only_measured(finished):
    run_dir, summary, data, splits = finished
    section, out = summary["compression"], run_dir / "compression"
    assert section["guard"]["split"] == "validation"
    assert section["guard"]["rows"] == len(splits.val)
    (_, _), (X_val, y_val), (X_te, y_te) = fit_transform(data, splits.train, splits.val,
                                                         splits.test)
    teacher = comp.load_model(out, "00_teacher")  # rebuilt from arch + weights_only state_dict
    assert section["teacher"]["val_accuracy"] == pytest.approx(_accuracy(teacher, X_val, y_val))
    assert section["teacher"]["accuracy"] == pytest.approx(_accuracy(teacher, X_te, y_te))
    distill = section["stages"][1]
    student = comp.load_model(out, "02_distill")
    assert distill["val_accuracy"] == pytest.approx(_accuracy(student, X_val, y_val))
    assert distill["val_accuracy_drop"] == pytest.approx(
        section["teacher"]["val_accuracy"] - distill["val_accuracy"])
    assert distill["accuracy"] == pytest.approx(_accuracy(student, X_te, y_te))


def test_every_saved_model_reloads_safely_and_matches_its_export(finished):
    run_dir, summary, data, splits = finished
    out = run_dir / "compression"
    (X_te, _), = fit_transform(data, splits.test)
    X = torch.as_tensor(X_te)
    for name in ("winner", "00_teacher", "02_distill"):
        rebuilt = comp.load_model(out, name)
        scripted = torch.jit.load(str(out / f"{name}.ts"))
        assert torch.allclose(comp.predict(rebuilt, X), comp.predict(scripted, X), atol=1e-4)
    # torchao's int8 layers cannot be traced: the state_dict + recipe is the saved form
    assert not (out / "03_quantize.ts").exists()
    quant = summary["compression"]["stages"][2]["export"]
    assert quant["checked_with"] == "state_dict" and quant["outputs_match"]
    assert comp.is_quantized(comp.load_model(out, "03_quantize"))
    assert not list(out.glob("01_prune.*"))  # a rejected stage exports nothing
    assert json.loads((out / "chain.json").read_text())["table"] == (
        summary["compression"]["table"])


def test_automl_compress_reruns_from_a_finished_run_dir(finished, tmp_path):
    run_dir, summary, data, splits = finished
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("spec.yaml", "summary.json", "best"):
        src = run_dir / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, copy / name)
    shutil.copytree(run_dir / "compression", copy / "compression")
    reg = Registry(tmp_path / "registry")  # the run had registered its winner
    win = reg.register("tinyc", {"model.pt": copy / "best" / "model.pt"}, format=CHECKPOINT,
                       lineage={})
    summary_file = json.loads((copy / "summary.json").read_text())
    summary_file["registry"] = {"dir": str(reg.root), "winner": win.ref, "versions": [win.ref]}
    (copy / "summary.json").write_text(json.dumps(summary_file))
    other = write_spec(tmp_path, "compression:\n  latency_repeats: 3\n  max_slowdown: null\n"
                                 "  stages:\n    - {stage: quantize, method: static, "
                                 "calibration_batches: 2, max_accuracy_drop: 1.0}\n", "other.yaml")
    result = CliRunner().invoke(app, ["compress", str(copy), "--spec", str(other)])
    assert result.exit_code == 0, result.output
    # the new chain's accepted model is registered as a child of the run's winner
    child = reg.get("tinyc-01_quantize")
    assert (child.ref, child.lineage["parent"], child.lineage["kind"]) == (
        "tinyc-01_quantize@1", "tinyc@1", "compressed")
    assert child.lineage["compression"][-1] == "01_quantize"
    # ONNX Runtime's int8 of the stage's input is registered too when its guard accepts it
    # (a float model's few points of accuracy on 2 folds of tiny training decide)
    from automl.rundir import onnx_int8_models

    ort = [f"tinyc-{q['name']}@1" for q in onnx_int8_models(
        json.loads((copy / "compression" / "chain.json").read_text()))]
    assert ort in ([], ["tinyc-01_quantize_ort@1"])
    assert json.loads((copy / "summary.json").read_text())["registry"]["versions"] == [
        "tinyc@1", "tinyc-01_quantize@1", *ort]
    assert (f"registry {', '.join(['tinyc-01_quantize@1', *ort])} in {reg.root} (parent "
            f"tinyc@1; automl registry "
            f"show tinyc-01_quantize@1 --dir {reg.root})") in " ".join(result.output.split())
    # a second `automl compress` makes the same files (a new process traces the same
    # TorchScript): registering them again adds no version and says so
    from automl.publish import register_recompressed

    console = Console(record=True, width=200)
    assert register_recompressed(copy, console) == []
    assert [v.ref for v in reg.versions("tinyc-01_quantize")] == ["tinyc-01_quantize@1"]
    assert ("registry tinyc-01_quantize@1 unchanged (same sha256); not registered again"
            in console.export_text())
    again = json.loads((copy / "summary.json").read_text())["compression"]
    assert [(s["stage"], s["spec"].get("method")) for s in again["stages"]] == [
        ("quantize", "static")]
    assert [r["name"] for r in again["table"]][:3] == ["winner", "00_teacher", "01_quantize"]
    assert not list((copy / "compression").glob("02_distill.*"))  # old results replaced
    old = {r["name"]: r for r in summary["compression"]["table"]}
    new = {r["name"]: r for r in again["table"]}
    for name in ("winner", "00_teacher"):  # same split, same seed: the same models
        assert new[name]["test_accuracy"] == pytest.approx(old[name]["test_accuracy"])
        assert new[name]["params"] == old[name]["params"]
    assert new["00_teacher"]["val_accuracy"] == pytest.approx(old["00_teacher"]["val_accuracy"])
    assert "01_quantize" in result.output and "compression" in result.output


@pytest.mark.parametrize("missing", ["best/model.pt", "spec.yaml", "summary.json"])
def test_automl_compress_on_an_unfinished_run_exits_2(tmp_path, missing):
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "best/model.pt"):
        if name != missing:
            (run / name).write_text("{}")
    result = CliRunner().invoke(app, ["compress", str(run)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and missing in lines[0] and "not a finished run" in lines[0]


# --------------------------------------------------------------------------- the main job
@pytest.mark.e2e
def test_main_job_ends_with_the_chain_and_registers_kept_models(ray_cluster, tmp_path,
                                                                 monkeypatch):
    from automl.compress import _warm

    warmers = []

    def recorded(modules):
        warmers.append(_warm.ImportWarmer(modules))
        warmers[-1].start()
        return warmers[-1]

    monkeypatch.setattr(_warm, "warm_up", recorded)
    text = TINY.split("compression:")[0] + (
        "compression:\n  latency_repeats: 3\n  max_slowdown: null\n  stages:\n"
        "    - {stage: quantize, method: static, calibration_batches: 2, max_accuracy_drop: 1}\n")
    exp = load_spec(write_spec(tmp_path, text.replace("num_samples: 2", "num_samples: 1")))
    run_dir = choose_run_dir(exp, str(tmp_path / "runs"), None)
    summary = run_main_job(exp, run_dir, console=Console(quiet=True))
    section = summary["compression"]
    assert section["status"] == "completed" and section["stages"][0]["status"] == "accepted"
    assert [r["name"] for r in section["table"]] == ["winner", "00_teacher", "01_quantize",
                                                      "01_quantize_ort"]
    ort = section["table"][3]  # ONNX Runtime's int8 of the teacher: its own row
    assert ort["role"] == "ONNX Runtime static int8 of 00_teacher" and ort["size_bytes"] is None
    assert ort["params"] == section["table"][1]["params"] and ort["ort_latency_ms_b1"] > 0
    assert ort["onnx_bytes"] < section["table"][1]["onnx_bytes"]  # else rejected as larger
    cv = summary["winner"]["cv"]["accuracy"]["mean"]
    assert section["table"][0]["cv_accuracy"] == pytest.approx(cv)
    assert section["table"][0]["test_accuracy"] == pytest.approx(summary["test"]["accuracy"])
    assert json.loads((run_dir / "summary.json").read_text())["compression"]["table"] == (
        section["table"])
    assert summary["registry"]["versions"] == ["tinyc@1", "tinyc-01_quantize@1",
                                               "tinyc-01_quantize_ort@1"]
    # the one trial ran all 3 epochs: the teacher is its last checkpoint, not trained again
    # (the refit trained alone), and scores the validation rows as the trial did
    trial = json.loads((run_dir / "trials.json").read_text())[0]
    assert trial["end_state"] == "completed"
    assert section["teacher_from"] == f"from trial {trial['trial_id']}'s epoch-3 checkpoint"
    assert section["teacher"]["val_accuracy"] == pytest.approx(
        trial["history"][-1]["val_accuracy"], abs=1e-9)
    # so the refit ran beside the chain, on one slot (the chain held the other core), and
    # the chain read best/model.pt once the refit had written it
    assert "refit_wait_s" in section["timing_s"]
    env = json.loads((run_dir / "reproducibility.json").read_text())["environment"]
    assert env["threads"]["intra_op"] == int(exp.resources.cpus_per_worker) == 1
    # the chain's first-call imports were warmed up beside Ray's start, and had ended
    [warmer] = warmers
    assert warmer.modules == _warm.BASE + _warm.ONNX + _warm.QUANTIZE
    assert warmer.imported == list(warmer.modules) and warmer.error is None
    assert not warmer.is_alive()


def test_a_refit_that_fails_beside_the_chain_fails_the_job_and_saves_no_compression(
        ray_cluster, tmp_path, monkeypatch):
    import automl.selection

    alone = []

    def broken(*args, **kwargs):
        alone.append(kwargs.get("alone"))
        raise RunError("training trial 0 on fold all failed: out of memory", where="selection")

    monkeypatch.setattr(automl.selection, "refit_and_test", broken)
    text = TINY.split("compression:")[0] + (
        "compression:\n  latency_repeats: 3\n  max_slowdown: null\n  onnx: false\n  stages:\n"
        "    - {stage: quantize, method: dynamic, max_accuracy_drop: 1}\n")
    exp = load_spec(write_spec(tmp_path, text.replace("num_samples: 2", "num_samples: 1")))
    run_dir = choose_run_dir(exp, str(tmp_path / "runs"), None)
    with pytest.raises(RunError, match="out of memory"):  # the refit's error, not the chain's
        run_main_job(exp, run_dir, console=Console(quiet=True))
    assert alone == [False]  # it ran beside the chain (the teacher is the trial's)
    stages = {p.stem for p in (run_dir / "stages").glob("*.json")}
    assert stages == {"search", "cv"}  # a resume runs the refit and the chain again
    assert not (run_dir / "compression" / "chain.json").exists()
    assert not (run_dir / "summary.json").exists()


def test_automl_compress_without_a_chain_asks_for_one(finished, tmp_path):
    run_dir, summary, data, splits = finished
    run = tmp_path / "run"
    shutil.copytree(run_dir / "best", run / "best")
    shutil.copy(run_dir / "summary.json", run / "summary.json")
    spec = yaml.safe_load((run_dir / "spec.yaml").read_text())
    spec.pop("compression")
    (run / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["compress", str(run)])
    assert result.exit_code == 2
    assert "compression.stages" in result.output and "--spec" in result.output
    assert not (run / "compression").exists()


def test_console_table_shows_non_zero_parameters_only_when_pruning_left_zeros():
    def row(name, nonzero):
        return {"name": name, "params": 169834, "nonzero_params": nonzero, "macs": 4.5e6,
                "size_bytes": 7e5, "latency_ms_b1": 0.8, "latency_ms_b64": 9.7,
                "val_accuracy": 0.99, "test_accuracy": 0.99, "cv_accuracy": None,
                "agreement": 1.0}

    for rows, shown in (([row("winner", 169834), row("01_prune", 85402)], True),
                        ([row("winner", 169834), row("01_quantize", 169834)], False)):
        console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        job.print_compression(console, {"table": rows, "stages": [], "wall_time_s": 1.0,
                                        "out_dir": "x"})
        text = console.export_text()
        assert ("non-zero" in text) is shown and ("85,402" in text) is shown, text


def test_the_refit_thread_hands_over_its_result_or_its_error_and_always_stops_ray():
    from automl.pipeline import RefitFailed, _Beside

    stopped = []
    ok = _Beside(lambda: {"test": 1}, then=lambda: stopped.append("ok"))
    ok.wait()
    assert ok.result() == {"test": 1} and stopped == ["ok"]

    def fail():
        raise RunError("refit failed", where="selection")

    bad = _Beside(fail, then=lambda: stopped.append("bad"))
    with pytest.raises(RefitFailed):  # what the chain sees: not an error of its own
        bad.wait()
    assert not isinstance(RefitFailed("x"), Exception)  # compress_step does not record it
    with pytest.raises(RunError, match="refit failed"):
        bad.result()
    assert stopped == ["ok", "bad"]
