"""Compression stages on sklearn digits (pixels / 16, (N, 1, 8, 8)), small models, 1 thread."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import automl.compress as comp
from automl.errors import DataError
from automl.models import build_model

TEACHER = {"family": "resnet", "width": 8, "stages": 2}
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: more threads only thrash
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def splits():  # fixed stratified split: 1221 train / 216 val / 450 test
    d = load_digits()
    X, y = (d.data / 16.0).reshape(-1, 1, 8, 8).astype(np.float32), d.target
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.15, stratify=y_tr,
                                              random_state=0)
    return (X_tr, y_tr), (X_va, y_va), (X_te, y_te)


def _ctx(splits, out_dir, **kw):
    return comp.make_context(*splits, out_dir, latency_repeats=3, **kw)


def _acc(model, ctx):
    return float((comp.predict(model, ctx.X_test).argmax(1) == ctx.y_test).float().mean())


def _n_params(model):
    return sum(p.numel() for p in model.parameters())


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def ctx(splits, tmp_path_factory):
    return _ctx(splits, tmp_path_factory.mktemp("ctx"), teacher_arch=TEACHER)


@pytest.fixture(scope="module")
def teacher(ctx):
    torch.manual_seed(0)
    model = build_model(TEACHER, ctx.input_shape, ctx.num_classes)
    comp.train(model, ctx.X_train, ctx.y_train, epochs=8, lr=3e-3)
    assert _acc(model, ctx) > 0.85
    return model


def test_training_is_deterministic(ctx):
    def fit():
        torch.manual_seed(1)
        model = build_model({"family": "mlp", "width": 16}, ctx.input_shape, 10)
        return comp.train(model, ctx.X_train, ctx.y_train, epochs=1, seed=3)
    assert _same_state(fit(), fit())


@pytest.mark.parametrize("arch", [{"family": "vgg", "width": 4, "depth": 1, "fc_width": 16},
                                  {"family": "vit", "dim": 8, "depth": 1, "heads": 2},
                                  {"family": "mlp", "width": 32}])
def test_other_families_prune_and_quantize(arch, ctx):
    model = build_model(arch, ctx.input_shape, 10).eval()
    pruned = comp.PruneStage("structured", pruning_ratio=0.5).run(model, ctx)
    assert pruned.info["params_after"] < pruned.info["params_before"]
    quant = comp.QuantizeStage("dynamic").run(pruned.model, ctx)
    assert comp.is_quantized(quant.model)
    assert comp.predict(quant.model, ctx.X_test[:5]).shape == (5, 10)


def test_distillation_loss_limits():
    torch.manual_seed(0)
    s, t, y = torch.randn(8, 10), torch.randn(8, 10), torch.randint(0, 10, (8,))
    assert torch.allclose(comp.distillation_loss(s, t, y, 4.0, 0.0), F.cross_entropy(s, y))
    assert float(comp.distillation_loss(t, t, y, 4.0, 1.0)) == pytest.approx(0.0, abs=1e-6)


def test_distill_student_is_smaller_and_reports_agreement(teacher, ctx):
    before = copy.deepcopy(teacher)
    student = {"family": "resnet", "width": 4, "stages": 2}
    out = comp.DistillStage(student, epochs=12, lr=3e-3).run(teacher, ctx)
    assert _n_params(out.model) * 3 < _n_params(teacher)
    assert 0.5 < out.info["val_agreement_with_stage_teacher"] <= 1.0
    assert out.recipe["arch"]["width"] == 4
    assert _same_state(teacher, before)


def test_distill_skips_a_student_that_is_not_smaller(teacher, ctx):
    out = comp.DistillStage({"family": "resnet", "width": 16, "stages": 2}).run(teacher, ctx)
    assert out.model is None and "not fewer than the teacher" in out.skipped


def test_structured_prune_removes_channels_without_touching_input(teacher, ctx):
    before = copy.deepcopy(teacher)
    out = comp.PruneStage("structured", pruning_ratio=0.5, fine_tune_epochs=1).run(teacher, ctx)
    pruned = out.model
    assert pruned.stem[0].out_channels < teacher.stem[0].out_channels == 8
    assert out.info["macs_after"] < 0.5 * out.info["macs_before"]
    assert _n_params(pruned) < 0.5 * _n_params(teacher)
    assert pruned.fc.out_features == 10 and _same_state(teacher, before)
    assert not comp.has_pruning_leftovers(teacher) and not comp.has_pruning_leftovers(pruned)
    clone = copy.deepcopy(pruned)  # no hooks or pruner state travel with a copy
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in clone.modules())
    assert torch.allclose(comp.predict(clone, ctx.X_test), comp.predict(pruned, ctx.X_test))
    by_macs = comp.PruneStage("structured", macs_target=0.6).run(teacher, ctx).info
    assert by_macs["macs_after"] <= 0.6 * by_macs["macs_before"]


def test_unstructured_prune_hits_sparsity_and_leaves_no_masks(teacher, ctx):
    seen, ctx2 = [], copy.copy(ctx)

    def fine_tune(model, epochs, lr):  # records that the masks are live while tuning
        seen.append(comp.has_pruning_leftovers(model))
        return ctx.fine_tune(model, epochs, lr)

    ctx2.fine_tune = fine_tune
    stage = comp.PruneStage("unstructured", sparsity=0.6, iterative_steps=2, fine_tune_epochs=1)
    out = stage.run(teacher, ctx2)
    assert seen == [True, True]
    assert not any(k.endswith(("_orig", "_mask")) for k in out.model.state_dict())
    assert not comp.has_pruning_leftovers(out.model) and not comp.has_pruning_leftovers(teacher)
    assert not comp.has_pruning_leftovers(copy.deepcopy(out.model))
    assert comp.sparsity(out.model) >= 0.6 - 1e-3
    assert comp.sparsity(teacher) < 0.01  # the input model was not pruned
    ws = [m.weight for m in out.model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert sum(int((w == 0).sum()) for w in ws) / sum(w.numel() for w in ws) >= 0.6 - 1e-3


def test_dynamic_quant_shrinks_linear_model_file(splits, tmp_path):
    # int8 of this MLP is several times slower at batch 1 here: the latency check off, this
    # test is about the file and the reload (the check: test_a_step_slower_than_its_parent...)
    ctx = _ctx(splits, tmp_path, teacher_arch={"family": "mlp", "width": 512}, max_slowdown=None)
    torch.manual_seed(0)
    mlp = build_model(ctx.teacher_arch, ctx.input_shape, 10)
    comp.train(mlp, ctx.X_train, ctx.y_train, epochs=2)
    spec = [{"stage": "quantize", "method": "dynamic", "max_accuracy_drop": 0.02}]
    res = comp.run_chain(mlp, spec, ctx)
    rec = res.stages[0]
    assert rec.status == "accepted", rec.reason
    assert res.teacher.size_bytes >= 3 * rec.measurement.size_bytes
    assert rec.measurement.params == res.teacher.params
    again = comp.load_model(tmp_path, "01_quantize")  # rebuilt from arch + weights_only state_dict
    assert torch.equal(comp.predict(again, ctx.X_test), comp.predict(res.final_model, ctx.X_test))


def test_growth_reason_names_the_parent_the_engine_and_the_figures():
    from automl.compress._base import growth_reason

    kw = {"parent": "00_teacher", "engine": "PyTorch", "max_slowdown": 0.1}
    assert growth_reason(1.673, 0.023, 900, 1000, **kw) == (  # issue 45 item 6
        "73x slower than its parent 00_teacher at batch 1 in PyTorch (1.673 ms against "
        "0.023 ms; max slowdown 10%)")
    assert growth_reason(0.0252, 0.023, 900, 1000, **kw) is None  # within 10%: noise
    assert growth_reason(0.0254, 0.023, 900, 1000, **kw).startswith("1.1x slower")
    assert growth_reason(5.0, 0.023, 900, 1000, **{**kw, "max_slowdown": None}) is None
    assert growth_reason(0.01, 0.023, 1001, 1000, **kw) == (
        "its file is larger than its parent 00_teacher's (1,001 bytes against 1,000)")
    assert growth_reason(None, 0.023, None, 1000, **kw) is None  # nothing to compare


def _fake_latency(monkeypatch, teacher_ms: float, step_ms: float, confirmed, size=None):
    """The chain's measurements with fabricated batch-1 latencies (and file size of the
    steps): the teacher ``teacher_ms``, every step ``step_ms``; ``confirm_latency`` answers
    ``confirmed`` (step, parent)."""
    import dataclasses

    from automl.compress import chain as chain_mod

    real = chain_mod.measure

    def measure(model, ctx, name, teacher_pred, **kw):
        m = real(model, ctx, name, teacher_pred, **kw)
        if name == "00_teacher":
            return dataclasses.replace(m, latency_ms_b1=teacher_ms)
        return dataclasses.replace(m, latency_ms_b1=step_ms,
                                   size_bytes=size if size is not None else m.size_bytes)

    asked = []
    monkeypatch.setattr(chain_mod, "measure", measure)
    monkeypatch.setattr(chain_mod, "confirm_latency",
                        lambda run, parent_run: asked.append(1) or confirmed, raising=False)
    return asked


def test_a_step_slower_than_its_parent_is_rejected_with_the_figures(splits, tmp_path,
                                                                    monkeypatch):
    ctx = _ctx(splits, tmp_path, teacher_arch={"family": "mlp", "width": 64}, onnx=False)
    torch.manual_seed(0)
    mlp = build_model(ctx.teacher_arch, ctx.input_shape, 10)
    comp.train(mlp, ctx.X_train, ctx.y_train, epochs=1)
    spec = [{"stage": "quantize", "method": "dynamic", "max_accuracy_drop": 1.0}]
    asked = _fake_latency(monkeypatch, 0.023, 1.673, confirmed=(1.7, 0.0231))
    res = comp.run_chain(mlp, spec, ctx)
    rec = res.stages[0]
    assert rec.status == "rejected" and asked == [1]  # measured again before rejecting
    assert rec.reason == ("74x slower than its parent 00_teacher at batch 1 in PyTorch "
                          "(1.700 ms against 0.023 ms; max slowdown 10%)")
    assert rec.info["growth_check"]["latency_ms_b1"] == 1.673 and rec.measurement is None
    assert res.final_name == "00_teacher" and not list(tmp_path.glob("01_quantize*"))
    saved = json.loads((tmp_path / "chain.json").read_text())["stages"][0]
    assert saved["status"] == "rejected" and saved["reason"] == rec.reason
    assert f"#1 quantize: rejected ({rec.reason})" in res.table()
    # the second measurement, beside the parent, finds it as fast: noise, accepted
    _fake_latency(monkeypatch, 0.023, 1.673, confirmed=(0.024, 0.023))
    again = comp.run_chain(mlp, spec, _ctx(splits, tmp_path / "b", onnx=False,
                                           teacher_arch=ctx.teacher_arch))
    assert again.stages[0].status == "accepted", again.stages[0].reason
    assert again.stages[0].info["growth_check"]["confirmed_latency_ms_b1"] == 0.024
    # larger file than its parent: rejected without measuring again
    asked = _fake_latency(monkeypatch, 0.023, 0.01, confirmed=None, size=10**9)
    big = comp.run_chain(mlp, spec, _ctx(splits, tmp_path / "c", onnx=False,
                                         teacher_arch=ctx.teacher_arch))
    assert big.stages[0].status == "rejected" and not asked
    assert big.stages[0].reason.startswith("its file is larger than its parent 00_teacher's "
                                           "(1,000,000,000 bytes against ")


def test_static_ptq_on_conv_net_and_skip_without_linear(teacher, ctx):
    conv_only = nn.Sequential(nn.Conv2d(1, 10, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    skipped = comp.QuantizeStage("dynamic").run(conv_only, ctx)
    assert skipped.model is None and "nn.Linear" in skipped.skipped
    out = comp.QuantizeStage("static", calibration_batches=4).run(teacher, ctx)
    assert comp.is_quantized(out.model) and not comp.is_quantized(teacher)
    assert _acc(out.model, ctx) >= _acc(teacher, ctx) - 0.03
    assert out.info["calibration_rows"] == 4 * ctx.batch_size


def test_export_torchscript_matches(teacher, ctx, tmp_path):
    recipe = {"arch": TEACHER, "input_shape": [1, 8, 8], "num_classes": 10}
    exp = comp.export_model(teacher, tmp_path, "t", recipe, ctx.X_test)
    assert exp.outputs_match and exp.max_abs_diff <= exp.atol and exp.argmax_agreement == 1.0
    scripted = torch.jit.load(str(exp.script_path))
    assert torch.allclose(scripted(ctx.X_test), comp.predict(teacher, ctx.X_test), atol=exp.atol)
    assert json.loads(exp.config_path.read_text())["arch"] == TEACHER


def test_weights_only_reload_and_pickled_code_refused(teacher, tmp_path):
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    torch.save(teacher.state_dict(), good)
    assert comp.load_state_dict_file(good).keys() == teacher.state_dict().keys()
    torch.save(teacher, bad)  # the whole module: needs code to unpickle
    with pytest.raises(DataError, match="refused"):
        comp.load_state_dict_file(bad)


@pytest.mark.parametrize("spec, key", [
    ({"stage": "shrink"}, "stage"), ({"stage": "prune", "pruning_ratio": 1.5}, "pruning_ratio"),
    ({"stage": "prune", "sparsity": 0.5}, "sparsity"), ({"stage": "prune", "ratio": 0.5}, "ratio"),
    ({"stage": "distill", "epochs": 3}, "student"),
    ({"stage": "distill", "student": {"family": "mlp"}, "alpha": 2}, "alpha"),
    ({"stage": "quantize", "method": "int4"}, "method"),
    ({"stage": "quantize", "max_accuracy_drop": -1}, "max_accuracy_drop")])
def test_bad_stage_params_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key):
        comp.make_stage(spec)


def test_bad_student_arch_fails_before_any_work(teacher, splits, tmp_path):
    ctx = _ctx(splits, tmp_path)
    spec = [{"stage": "distill", "student": {"family": "resnet", "wdth": 4}}]
    with pytest.raises(ValueError, match=r"stages\[0\]\.student"):
        comp.run_chain(teacher, spec, ctx)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def chain(teacher, splits, tmp_path_factory):
    # int8 of these tiny models is slower at batch 1 than their float parents here, so the
    # latency check is off: this chain tests the accuracy guard, exports and reloads
    ctx = _ctx(splits, tmp_path_factory.mktemp("chain"), teacher_arch=TEACHER,
               max_slowdown=None)
    spec = [{"stage": "prune", "pruning_ratio": 0.85, "max_accuracy_drop": 0.0},
            {"stage": "prune", "method": "structured", "pruning_ratio": 0.3, "fine_tune_epochs": 4,
             "lr": 3e-3, "max_accuracy_drop": 0.1},
            {"stage": "quantize", "method": "static", "max_accuracy_drop": 0.05},
            {"stage": "quantize", "method": "dynamic", "max_accuracy_drop": 0.05}]
    before = copy.deepcopy(teacher)
    res = comp.run_chain(teacher, spec, ctx)
    assert _same_state(teacher, before)
    return res, ctx


def test_guard_rejects_chain_continues_and_measures(chain, teacher):
    res, ctx = chain
    rejected, pruned, quant, skipped = res.stages
    assert rejected.status == "rejected" and "validation accuracy drop" in rejected.reason
    assert rejected.measurement is None and rejected.val_accuracy_drop > 0
    assert rejected.accuracy is None and rejected.accuracy_drop is None  # test never read
    assert pruned.val_accuracy == pytest.approx(pruned.measurement.val_accuracy)
    assert pruned.accuracy_drop == pytest.approx(res.teacher.accuracy - pruned.accuracy)
    assert pruned.status == "accepted", pruned.reason
    assert pruned.info["params_before"] == _n_params(teacher)  # went on from the teacher
    assert quant.status == "accepted", quant.reason
    assert quant.measurement.size_bytes < pruned.measurement.size_bytes
    assert skipped.status == "skipped" and "already quantized" in skipped.reason
    assert res.final_name == "03_quantize"
    m = pruned.measurement
    assert m.macs < res.teacher.macs and m.params < res.teacher.params
    assert m.latency_ms_b1 > 0 and m.latency_ms_b64 > 0 and 0 < m.agreement <= 1
    saved = json.loads((ctx.out_dir / "chain.json").read_text())
    assert saved["stages"][0]["status"] == "rejected" and "final_model" not in saved
    assert "00_teacher" in res.table()


def test_chain_models_reload_from_state_dict_and_recipe(chain):
    res, ctx = chain
    for rec in res.stages[1:3]:
        name = f"{rec.index:02d}_{rec.stage}"
        rebuilt = comp.load_model(ctx.out_dir, name)  # build(arch) + pruned shapes + quantization
        if rec.export.script_path is not None:
            scripted = torch.jit.load(str(ctx.out_dir / f"{name}.ts"))
            ref = comp.predict(scripted, ctx.X_test)
            assert torch.allclose(comp.predict(rebuilt, ctx.X_test), ref, atol=1e-4)
        else:  # torchao layers: no TorchScript; the export checked the state_dict rebuild
            assert rec.export.checked_with == "state_dict" and rec.export.outputs_match
            assert "TorchScript cannot trace" in rec.export.script_skipped
            assert not (ctx.out_dir / f"{name}.ts").exists()
        assert _acc(rebuilt, ctx) == pytest.approx(rec.measurement.accuracy)


def _corrupt_val(ctx):
    """A copy of ``ctx`` whose validation labels are all wrong, so the teacher scores ~0 there."""
    bad = copy.copy(ctx)
    bad.y_val = (ctx.y_val + 1) % 10
    return bad


def test_guard_decides_on_validation_rows_not_test(teacher, splits, tmp_path):
    spec = [{"stage": "prune", "pruning_ratio": 0.85, "max_accuracy_drop": 0.0}]
    honest = comp.run_chain(teacher, spec, _ctx(splits, tmp_path / "a", teacher_arch=TEACHER))
    assert honest.stages[0].status == "rejected"  # a destructive prune, seen on validation
    # the same stage with validation labels that make the teacher look worthless: the guard
    # sees no drop there and accepts, although the test accuracy collapses
    ctx = _corrupt_val(_ctx(splits, tmp_path / "b", teacher_arch=TEACHER))
    fooled = comp.run_chain(teacher, spec, ctx)
    rec = fooled.stages[0]
    assert fooled.teacher.val_accuracy < 0.05
    assert rec.status == "accepted" and rec.val_accuracy_drop <= 0
    assert rec.accuracy < fooled.teacher.accuracy - 0.2  # measured on test, decided nothing


def test_chain_refuses_a_context_without_validation_rows(teacher, splits, tmp_path):
    (X_tr, y_tr), (X_va, y_va), test = splits
    ctx = comp.make_context((X_tr, y_tr), (X_va[:0], y_va[:0]), test, tmp_path)
    with pytest.raises(ValueError, match="validation rows"):
        comp.run_chain(teacher, [{"stage": "quantize"}], ctx)


def test_prune_fine_tunes_with_distillation_from_the_unpruned_model(teacher, ctx):
    seen, ctx2 = [], copy.copy(ctx)

    def fine_tune(model, epochs, lr, loss_fn=None):
        seen.append(loss_fn)
        return model

    ctx2.fine_tune = fine_tune
    stage = comp.PruneStage("structured", pruning_ratio=0.3, fine_tune_epochs=1,
                            distill_alpha=1.0, distill_temperature=2.0)
    out = stage.run(teacher, ctx2)
    assert len(seen) == 1 and seen[0] is not None
    assert out.info["fine_tune_loss"].startswith("distillation")
    idx = torch.arange(16)
    soft = comp.predict(teacher, ctx.X_train[idx])  # alpha 1: only the KL to these logits
    assert float(seen[0](soft, ctx.y_train[idx], idx)) == pytest.approx(0.0, abs=1e-5)
    assert float(seen[0](-soft, ctx.y_train[idx], idx)) > 0.1
    plain = comp.PruneStage("structured", pruning_ratio=0.3, fine_tune_epochs=1)
    seen.clear()
    plain.run(teacher, ctx2)
    assert seen == [None]


# --------------------------------------------------------------------------- torchao, ONNX
def test_torchao_quantizes_linear_layers_and_names_the_conv_fallback(teacher, ctx):
    from torchao.utils import TorchAOBaseTensor

    from automl.compress.quantize import FALLBACK, TORCHAO

    mlp = build_model({"family": "mlp", "width": 32}, ctx.input_shape, 10).eval()
    for method in ("dynamic", "static"):
        out = comp.QuantizeStage(method, calibration_batches=2).run(mlp, ctx)
        assert out.info["engines"] == {TORCHAO: ["net.1", "net.4", "net.7"]}
        assert out.info["fallback"] is None  # torchao covers every layer of an MLP
        weights = [m.weight for m in out.model.modules() if isinstance(m, nn.Linear)]
        assert weights and all(isinstance(w, TorchAOBaseTensor) for w in weights)
        assert (comp.predict(out.model, ctx.X_test).argmax(1) ==
                comp.predict(mlp, ctx.X_test).argmax(1)).float().mean() > 0.9
    out = comp.QuantizeStage("static", calibration_batches=2).run(teacher, ctx)
    convs = [n for n, m in teacher.named_modules() if isinstance(m, nn.Conv2d)]
    assert out.info["engines"] == {TORCHAO: ["fc"], FALLBACK: convs}
    assert out.info["fallback"]["layers"] == convs and "Conv" not in out.info["fallback"]["engine"]
    assert "nn.Linear only" in out.info["fallback"]["reason"]
    assert isinstance(out.model.fc.weight, TorchAOBaseTensor)
    assert out.info["int8_modules"] >= 2


def test_no_torch_ao_quantization_import_outside_the_documented_fallback():
    import ast
    from pathlib import Path

    import automl

    found = []
    for path in Path(automl.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.startswith("torch.ao.quantization") for n in names):
                found.append(path.name)
    assert found == ["quantize.py", "quantize.py"]  # _fx_convs: the conv fallback only


def test_onnx_export_has_a_dynamic_batch_and_matches_in_onnx_runtime(teacher, ctx, tmp_path,
                                                                     monkeypatch):
    import onnx

    from automl.compress import onnx_export as ox

    c = copy.copy(ctx)
    c.out_dir, c.max_slowdown = tmp_path, None  # int8 of a tiny net may be slower (see below)
    res = ox.export_checked(teacher, c, "t")
    assert res.skipped is None and res.path == tmp_path / "t.onnx" and res.bytes > 0
    assert res.n_checked == len(ctx.X_test) and res.max_abs_diff < 1e-4
    assert res.argmax_agreement == 1.0 and res.latency_ms_b1 > 0 and res.latency_ms_b64 > 0
    (inp,) = onnx.load(str(res.path)).graph.input
    assert inp.type.tensor_type.shape.dim[0].dim_param == "batch"
    model = ox.OnnxModel(res.path)
    for n in (1, 64):  # any batch size
        assert torch.allclose(model(ctx.X_test[:n]), comp.predict(teacher, ctx.X_test[:n]),
                              atol=1e-4)
    # ONNX Runtime's static int8, judged on validation rows like any stage
    t_val = float((comp.predict(teacher, ctx.X_val).argmax(1) == ctx.y_val).float().mean())
    t_pred = comp.predict(teacher, ctx.X_test).argmax(1)
    calib = comp.QuantizeStage("static", calibration_batches=2).calibration(c)
    q = ox.onnx_int8("q", "t", teacher, res, calib, c, max_drop=0.05, teacher_val_accuracy=t_val,
                     teacher_accuracy=_acc(teacher, c), teacher_pred=t_pred)
    assert q.status == "accepted", q.reason
    assert q.calibration_rows == 2 * ctx.batch_size and q.bytes < res.bytes
    assert q.val_accuracy_drop <= 0.05 and q.source_agreement > 0.9
    assert q.accuracy == pytest.approx(float((ox.OnnxModel(q.path)(ctx.X_test).argmax(1)
                                              == ctx.y_test).float().mean()))
    strict = ox.onnx_int8("q2", "t", teacher, res, calib, c, max_drop=-1.0,
                          teacher_val_accuracy=t_val, teacher_accuracy=0.0, teacher_pred=t_pred)
    assert strict.status == "rejected" and strict.accuracy is None and strict.path is None
    assert not (tmp_path / "q2.onnx").exists()  # a rejected model leaves no file
    # slower than its source in ONNX Runtime (fabricated timings): rejected, no file left
    c.max_slowdown = 0.1
    real_session, names = ox.session, {}

    def session(path, threads=1):
        sess = real_session(path, threads)
        names[id(sess)] = Path(path).name
        return sess

    monkeypatch.setattr(ox, "session", session)
    monkeypatch.setattr(ox, "ort_latency_ms", lambda sess, x, reps, warmup=3:
                        0.5 if names.get(id(sess)) == "slow.onnx" else 0.05)
    slow = ox.onnx_int8("slow", "t", teacher, res, calib, c, max_drop=0.05,
                        teacher_val_accuracy=t_val, teacher_accuracy=_acc(teacher, c),
                        teacher_pred=t_pred)
    assert slow.status == "rejected" and slow.accuracy is None and slow.path is None
    assert slow.reason == ("10x slower than its parent t at batch 1 in ONNX Runtime (0.500 ms "
                           "against 0.050 ms; max slowdown 10%)")
    assert not (tmp_path / "slow.onnx").exists()
    quant = comp.QuantizeStage("dynamic").run(teacher, c).model
    skipped = ox.export_checked(quant, c, "int8")
    assert skipped.path is None and "no ONNX export" in skipped.skipped
    assert "\n" not in skipped.skipped


def test_onnx_export_falls_back_to_the_torch_export_based_exporter(teacher, ctx, tmp_path,
                                                                    monkeypatch):
    from automl.compress import onnx_export as ox

    real, calls = torch.onnx.export, []

    def legacy_gone(*args, **kw):
        calls.append(kw.get("dynamo", True))
        if kw.get("dynamo") is False:
            raise RuntimeError("the TorchScript-based exporter is gone")
        return real(*args, **kw)

    monkeypatch.setattr(torch.onnx, "export", legacy_gone)
    path = ox.export_onnx(teacher, tmp_path / "f.onnx", ctx.X_test[:4])
    assert calls == [False, True]
    assert torch.allclose(ox.OnnxModel(path)(ctx.X_test[:5]),
                          comp.predict(teacher, ctx.X_test[:5]), atol=1e-4)


def test_chain_exports_kept_float_models_to_onnx_and_adds_ort_int8(chain):
    res, ctx = chain
    assert res.teacher_onnx.max_abs_diff < 1e-4 and res.teacher_onnx.argmax_agreement == 1.0
    rejected, pruned, quant, skipped = res.stages
    assert rejected.onnx is None and pruned.onnx.path.name == "02_prune.onnx"
    assert pruned.onnx.max_abs_diff < 1e-4
    assert quant.onnx.path is None and "no ONNX export" in quant.onnx.skipped
    q = quant.onnx_int8  # the first quantize stage: ONNX Runtime's int8 of its input
    assert (q.name, q.source) == ("03_quantize_ort", "02_prune") and skipped.onnx_int8 is None
    assert q.status in ("accepted", "rejected") and q.val_accuracy is not None
    assert (q.accuracy is not None) == (q.status == "accepted") == (ctx.out_dir / "03_quantize_ort.onnx").exists()
    saved = json.loads((ctx.out_dir / "chain.json").read_text())
    assert saved["stages"][2]["onnx_int8"]["source"] == "02_prune"
    assert saved["teacher_onnx"]["path"].endswith("00_teacher.onnx")
