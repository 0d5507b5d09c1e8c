"""The compression's import warm-up (automl.compress._warm): which modules a spec's chain
needs, and a failed import kept on the thread instead of raised."""

import sys

from conftest import REPO

from automl.compress import _warm
from automl.spec import load_spec


def _compression(extra: dict):
    return load_spec(REPO / "search_spaces" / "resnet.yaml",
                     {f"compression.{k}": v for k, v in extra.items()}).compression


def test_the_main_specs_chain_warms_dynamo_onnx_and_torchao():
    exp = load_spec(REPO / "search_spaces" / "resnet.yaml")
    assert _warm.modules_for(exp.compression) == _warm.BASE + _warm.ONNX + _warm.QUANTIZE


def test_no_onnx_and_no_quantize_stage_warm_only_what_training_imports():
    comp = _compression({"onnx": False, "stages": [
        {"stage": "prune", "method": "structured", "pruning_ratio": 0.3}]})
    assert _warm.modules_for(comp) == _warm.BASE


def test_compression_off_warms_nothing_and_starts_no_thread():
    comp = _compression({"stages": []})
    assert _warm.modules_for(comp) == ()
    assert _warm.warm_up(()) is None


def test_a_failed_import_is_kept_on_the_thread_and_stops_it():
    assert "automl_no_such_module" not in sys.modules
    warmer = _warm.warm_up(["json", "automl_no_such_module", "colorsys"])
    warmer.join(timeout=60)
    assert not warmer.is_alive()
    assert warmer.imported == ["json"]
    assert warmer.error.startswith("automl_no_such_module: ModuleNotFoundError")
