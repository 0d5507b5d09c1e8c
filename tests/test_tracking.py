"""Tracking after the main job: per-trial offline W&B runs (read back with W&B's own
record schema and `wandb sync --dry-run`), TensorBoard event files, the registered
winner with its lineage, the report, and key redaction. Nothing touches the network:
W&B is offline and its base URL points at a closed local port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _logreaders import tfevents_scalars, wandb_runs
from conftest import assert_self_contained, write_spec
from rich.console import Console
from typer.testing import CliRunner

from automl._io import write_json
from automl.cli import app
from automl.pipeline import choose_run_dir, run_main_job
from automl.registry import Registry
from automl.spec import TrackingSpec, load_spec
from automl.tracking import REDACTED, api_key_source, redact, redact_text, resolve_mode, run_id
from automl.train import load_checkpoint

FAKE_KEY = "f" * 12 + "0123456789abcdef0123456789ab"  # 40 characters, like a W&B key
TINY = """
name: tiny
model:
  family: resnet
  resnet: {depth: 1, width: {type: categorical, choices: [8, 16]}, stages: 2}
training:
  lr: {type: float, low: 2e-3, high: 1e-2, log: true}
  batch_size: 128
  epochs: {type: int, low: 1, high: 2}
search: {num_samples: 4, seed: 0, sampler: random}
scheduler: {grace_period: 1, reduction_factor: 2, max_epochs: 2}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: wandb, mode: offline, tensorboard: true}
compression:
  # static: dynamic int8 of a conv net's one small Linear makes a larger file (rejected)
  stages: [{stage: quantize, method: static, calibration_batches: 2, max_accuracy_drop: 1.0}]
  latency_repeats: 3
  max_slowdown: null  # int8 of a tiny net is slower at batch 1
"""


# ------------------------------------------------------------------ units (no Ray)
def test_mode_resolution(monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    auto = TrackingSpec(mode="auto")
    assert resolve_mode(TrackingSpec(backend="none")) == "disabled"
    assert resolve_mode(auto) == "offline"  # no key anywhere
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert resolve_mode(auto) == "online"
    assert resolve_mode(TrackingSpec(mode="offline")) == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the environment's brake wins
    assert resolve_mode(TrackingSpec(mode="online")) == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_mode(TrackingSpec(mode="online")) == "offline"
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY")
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {FAKE_KEY}\n")
    assert api_key_source() == str(netrc)
    assert resolve_mode(auto) == "online"
    # a key found in the key file is redacted from then on, though not in the environment
    assert redact_text(f"key={FAKE_KEY}") == f"key={REDACTED}"


def test_run_ids_are_deterministic_per_sweep_and_trial(tmp_path):
    a = run_id("tiny", tmp_path / "tiny", "abc_00001")
    assert a == run_id("tiny", tmp_path / "tiny", "abc_00001") and len(a) == 16
    assert a != run_id("tiny", tmp_path / "tiny", "abc_00002")
    assert a != run_id("tiny", tmp_path / "tiny-2", "abc_00001")


def test_redaction_of_env_secrets_and_credential_patterns(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"
    digest = "ab" * 32  # a sha256 must survive
    obj = {"note": f"key {FAKE_KEY} and aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
           "id": "AKIAIOSFODNN7EXAMPLE", "gcp": {"private_key": pem, "project_id": "p1"},
           "api_key": "short", "lr": 0.01, "sha256": digest, "steps": [1, 2]}
    out = redact(obj)
    assert out["note"] == f"key {REDACTED} and aws {REDACTED}"
    assert out["id"] == REDACTED and out["api_key"] == REDACTED
    assert out["gcp"] == {"private_key": REDACTED, "project_id": "p1"}
    assert (out["lr"], out["sha256"], out["steps"]) == (0.01, digest, [1, 2])
    text = json.dumps({"creds": {"private_key": "-----BEGIN RSA PRIVATE KEY-----\nx\n"
                                                "-----END RSA PRIVATE KEY-----"}})
    assert "PRIVATE KEY-----" not in redact_text(text)
    write_json(tmp_path / "s.json", obj)  # every saved file goes through the redaction
    saved = (tmp_path / "s.json").read_text()
    assert FAKE_KEY not in saved and "AKIAIOSFODNN7EXAMPLE" not in saved
    assert json.loads(saved)["sha256"] == digest


# ------------------------------------------------------------------ after the main job
OUTPUT: dict[str, str] = {}  # what the main job printed, by fixture


@pytest.fixture(scope="module")
def main_job(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracking")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_API_KEY", FAKE_KEY)  # present, yet must never be written anywhere
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # a closed port: no network
        exp = load_spec(write_spec(tmp, TINY))
        run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
        with open(os.devnull, "w") as sink:
            console = Console(record=True, file=sink, width=200, soft_wrap=True)
            summary = run_main_job(exp, run_dir, console=console)
        OUTPUT["main_job"] = console.export_text()
        yield exp, run_dir, summary, json.loads((run_dir / "trials.json").read_text())


def test_main_job_ends_with_one_readable_line(main_job):
    _, run_dir, summary, _ = main_job
    last = OUTPUT["main_job"].strip().splitlines()[-1]
    counts = summary["trials"]
    assert last.startswith(f"winner trial {summary['winner']['trial_id']} "), last
    assert (f"; trials {counts['completed']} completed, {counts['stopped_early']} stopped early, "
            f"{counts['failed']} failed, {counts['diverged']} diverged of {counts['total']}; ") in last
    assert last.endswith(f"summary {run_dir / 'summary.json'}") and "{" not in last


def test_one_offline_wandb_run_per_trial_with_its_epochs(main_job):
    exp, run_dir, summary, trials = main_job
    runs = wandb_runs(run_dir / "wandb")
    expected = {run_id(run_dir.name, run_dir, t["trial_id"]): t for t in trials}
    assert set(runs) == set(expected) and len(runs) == 4
    for rid, parts in runs.items():
        trial, first = expected[rid], parts[0]
        assert (first["group"], first["project"], first["name"]) == (
            run_dir.name, "tiny", trial["trial_id"])
        assert first["config"]["params"] == trial["params"]
        logged = [(h["epoch"], h["val_accuracy"]) for h in first["history"]]
        assert logged == [(h["epoch"], pytest.approx(h["val_accuracy"]))
                          for h in trial["history"]]
        assert first["summary"]["end_state"] == trial["end_state"]
    assert summary["tracking"]["sync"] == f"wandb sync {run_dir.resolve() / 'wandb'}"


def test_winner_run_is_resumed_with_cv_table_and_model_artifact(main_job):
    exp, run_dir, summary, trials = main_job
    win = summary["winner"]["trial_id"]
    parts = wandb_runs(run_dir / "wandb")[run_id(run_dir.name, run_dir, win)]
    assert len(parts) == 2  # the trial's run, then the same id resumed for the results
    final = parts[1]
    assert final["summary"]["winner"] is True
    assert final["summary"]["test/accuracy"] == pytest.approx(summary["test"]["accuracy"])
    epochs = next(t["epochs_run"] for t in trials if t["trial_id"] == win)
    (table_row,) = [h for h in final["history"] if "cv/folds/_type" in h]
    assert table_row["_step"] == epochs + 1 and table_row["cv/folds/nrows"] == 2
    models = {a["name"]: a["aliases"] for a in final["artifacts"] if a["type"] == "model"}
    assert set(models) == {"tiny", "tiny-01_quantize", "tiny-01_quantize_ort"}
    assert {"best", run_dir.name} <= set(models["tiny"])
    assert run_dir.name in models["tiny-01_quantize"] and "best" not in models["tiny-01_quantize"]
    (stages,) = [h for h in final["history"] if "compression/stages/_type" in h]
    assert stages["_step"] == epochs + 1 and stages["compression/stages/nrows"] == 1


def test_wandb_cli_recognises_every_offline_run(main_job):
    exp, run_dir, summary, trials = main_job
    folders = list((run_dir / "wandb").glob("offline-run-*"))
    out = subprocess.run([str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run",
                          str(run_dir / "wandb")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WANDB_BASE_URL": "http://127.0.0.1:9"})
    assert f"Would sync {len(folders)} run(s)" in out.stdout + out.stderr


def test_tensorboard_events_per_trial(main_job):
    exp, run_dir, summary, trials = main_job
    for t in trials:
        folder = run_dir / "tensorboard" / f"trial_{t['trial_id']}"
        (events,) = folder.glob("events.out.tfevents.*")
        scalars = tfevents_scalars(events)["val_accuracy"]
        assert scalars == [(h["epoch"], pytest.approx(h["val_accuracy"])) for h in t["history"]]


def test_registry_holds_the_winner_with_lineage(main_job):
    exp, run_dir, summary, trials = main_job
    reg = Registry(run_dir.parent / "registry")
    assert summary["registry"]["winner"] == "tiny@1"
    v = reg.get("tiny")
    lin = v.lineage
    data = json.loads((run_dir / "data.json").read_text())
    assert (lin["spec_sha256"], lin["data_sha256"]) == (summary["spec_sha256"], data["sha256"])
    assert lin["trial_id"] == summary["winner"]["trial_id"] and lin["parent"] is None
    cv = next(c for c in summary["cv"]["candidates"] if c["trial_id"] == lin["trial_id"])
    assert lin["cv"]["scores"] == [f["scores"]["accuracy"] for f in cv["folds"]]
    assert lin["test"]["accuracy"] == summary["test"]["accuracy"] and lin["registered_at"]
    assert v.tracking["run_id"] == run_id(run_dir.name, run_dir, lin["trial_id"])
    model, _ = reg.load("tiny@1")
    ref, ckpt = load_checkpoint(run_dir / "best" / "model.pt")
    assert ckpt["config"] == lin["config"]
    x = torch.rand(5, 1, 8, 8)
    assert torch.equal(model(x), ref(x))


def test_registry_holds_the_compressed_model_with_its_parent(main_job):
    from automl.compress import load_model

    exp, run_dir, summary, trials = main_job
    assert summary["registry"]["versions"] == ["tiny@1", "tiny-01_quantize@1",
                                               "tiny-01_quantize_ort@1"]
    v = Registry(run_dir.parent / "registry").get("tiny-01_quantize")
    assert (v.lineage["parent"], v.lineage["kind"]) == ("tiny@1", "compressed")
    assert v.lineage["compression"][-1] == "01_quantize"
    assert v.lineage["spec_sha256"] == summary["spec_sha256"]
    (stage,) = summary["compression"]["stages"]
    assert v.lineage["test"]["accuracy"] == stage["accuracy"]
    model, _ = Registry(run_dir.parent / "registry").load("tiny-01_quantize@1")
    x = torch.rand(5, 1, 8, 8)
    assert torch.equal(model(x), load_model(run_dir / "compression", "01_quantize")(x))


def test_registry_show_names_a_model_card_whose_snippet_runs(main_job, tmp_path):
    from automl.card import extract_snippet

    exp, run_dir, summary, trials = main_job
    reg = Registry(run_dir.parent / "registry")
    res = CliRunner().invoke(app, ["registry", "show", "tiny@1", "--dir", str(reg.root)])
    assert res.exit_code == 0, res.output
    card = Path(res.stderr.strip().removeprefix("model card: "))
    assert card == (reg.get("tiny@1").path / "MODEL_CARD.md").resolve()
    assert Path(json.loads(res.stdout)["card"]).resolve() == card
    text = card.read_text()
    for heading in ("# tiny@1", "## Data and splits", "## The search that found it",
                    "## Cross-validation", "## Test scores", "## Confusion matrix (test split)",
                    "## Size, MACs and latency", "## Lineage", "## How to load it"):
        assert f"\n{heading}" in f"\n{text}", heading
    cv = summary["winner"]["cv"]["accuracy"]
    assert f"| accuracy | {cv['mean']:.4f} | {cv['std']:.4f} | [{cv['ci95'][0]:.4f}" in text
    assert summary["data"]["sha256"] in text and summary["winner"]["trial_id"] in text
    assert f"{summary['trials']['total']} of 4 requested" in text and "random (Optuna)" in text
    assert f"| accuracy | {summary['test']['accuracy']:.4f} |" in text
    assert "misclassified" in text and "Lowest recall" in text
    assert set(reg.get("tiny@1").files) >= {"model.pt", "model.ts", "model.onnx", "MODEL_CARD.md"}
    # each version's snippet runs as written, in a fresh interpreter
    refs = summary["registry"]["versions"]
    for i, ref in enumerate(refs):
        (tmp_path / f"s{i}.py").write_text(extract_snippet(reg.get(ref).card.read_text()))
    run_all = "import runpy, sys\nfor f in sys.argv[1:]:\n    print('#', f)\n    runpy.run_path(f)"
    out = subprocess.run([sys.executable, "-c", run_all, *[str(tmp_path / f"s{i}.py")
                                                          for i in range(len(refs))]],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    ways = [ln.split(" ", 1)[0] for ln in out.stdout.splitlines() if not ln.startswith("#")]
    # the winner: PyTorch, TorchScript, ONNX; torchao int8: PyTorch only; ONNX Runtime int8
    assert ways == ["pytorch", "torchscript", "onnx", "pytorch", "registry", "onnx"], out.stdout


def test_promote_moves_champion_in_registry_and_wandb(main_job):
    exp, run_dir, summary, trials = main_job
    reg_dir = run_dir.parent / "registry"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
        res = CliRunner().invoke(app, ["registry", "promote", "tiny@1", "--alias", "champion",
                                       "--dir", str(reg_dir)])
    assert res.exit_code == 0, res.output
    assert Registry(reg_dir).get("tiny@champion").version == 1
    win = summary["winner"]["trial_id"]
    last = wandb_runs(run_dir / "wandb")[run_id(run_dir.name, run_dir, win)][-1]
    (art,) = [a for a in last["artifacts"] if a["type"] == "model"]
    assert art["name"] == "tiny" and "champion" in art["aliases"]


def test_report_of_the_main_job(main_job):
    exp, run_dir, summary, trials = main_job
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    html = (run_dir / "report" / "index.html").read_text()
    for name in ("optimization_history", "parallel_coordinates", "param_importances",
                 "learning_curves", "cv_scores", "compression_tradeoff"):
        assert f'<div id="{name}"' in html and f'href="{name}.png"' in html
        assert (run_dir / "report" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_self_contained(html)


def test_api_key_is_written_nowhere(main_job):
    exp, run_dir, summary, trials = main_job
    leaks = [p for p in run_dir.parent.rglob("*")
             if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert leaks == []


def test_an_unreachable_wandb_server_turns_the_sweep_offline_within_seconds(tmp_path):
    """Measured before: with a key set and no route to the server, each trial's run took
    about 43 s to start and the run still said online. A server that accepts connections
    but never answers (on loopback) stands in for the unreachable one."""
    import socket
    import threading

    from automl.tracking import wandb_target
    from automl.tracking._sinks import WandbTrials

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accepted, never answered
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    lines: list[str] = []
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("WANDB_MODE", raising=False)
            mp.setenv("WANDB_API_KEY", FAKE_KEY)
            mp.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
            exp = load_spec(write_spec(tmp_path, "name: t\ntracking: {mode: auto}\n"))
            t0 = time.monotonic()
            target = wandb_target(exp, tmp_path / "run", lines.append, probe_timeout=2.0)
            assert time.monotonic() - t0 < 10
    finally:
        stop.set()
        t.join(5)
        server.close()
        for c in held:
            c.close()
    assert target.mode == "offline" and target.setting == "auto"
    (line,) = lines
    assert "unreachable" in line and f"`wandb sync {tmp_path / 'run' / 'wandb'}`" in line

    # a run that cannot start online mid-sweep moves the sink (and what it logs) offline
    online = type(target)(**{**target.to_dict(), "mode": "online"})
    sink = WandbTrials(online, lines.append)
    calls: list[str] = []

    def start_run(tgt, trial_id, config):
        calls.append(tgt.mode)
        if tgt.mode == "online":
            raise TimeoutError("init timed out")
        return type("Run", (), {"log": lambda *a, **k: None})()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("automl.tracking._sinks.start_run", start_run)
        from automl.search import TrialLog

        sink.start(TrialLog(0, params={"x": 1}, config={"x": 1}), None)
        sink.start(TrialLog(1, params={"x": 2}, config={"x": 2}), None)
    assert calls == ["online", "offline", "offline"] and sink.target.mode == "offline"
    assert "TimeoutError: init timed out: logging offline" in lines[-1]
