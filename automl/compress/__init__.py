"""Model compression: distillation, pruning, int8 quantization and export, run as a
declared chain with an accuracy-drop guard (see ``chain.run_chain``).

Works on any classifier ``nn.Module`` with data ``X`` float32 ``(N, C, H, W)`` or
``(N, F)`` and ``y`` int64 ``(N,)``. Sources: Hinton et al. 2015 (distillation), Fang et
al. 2023 DepGraph / torch-pruning (structured pruning), Han et al. 2015 (magnitude
pruning), Jacob et al. 2018 (int8 quantization).

``automl.compress.job`` wires the chain into the product: the main job's compression step
(``compress_step``) and ``automl compress RUN_DIR`` (``compress_run``); the chain is
declared in the spec's ``compression`` section (``automl.spec._compression``).

Quantization uses torchao's ``quantize_`` for ``nn.Linear`` layers; convolutions (static
only) keep ``torch.ao.quantization``'s FX path, the one documented fallback (see
``quantize.py``). ``onnx_export`` exports kept float models to ONNX, checks them in ONNX
Runtime and produces ONNX Runtime's static int8.
"""

from automl.compress._base import (
    Context,
    Measurement,
    Stage,
    StageOutput,
    make_context,
    measure,
    predict,
    train,
)
from automl.compress.chain import STAGES, ChainResult, StageRecord, make_stage, run_chain
from automl.compress.distill import DistillStage, distillation_loss
from automl.compress.export import (
    ExportResult,
    export_model,
    fit_shapes,
    load_model,
    load_state_dict_file,
    rebuild,
)
from automl.compress.onnx_export import (
    OnnxExport,
    OnnxInt8,
    OnnxModel,
    export_checked,
    export_onnx,
    quantize_onnx,
)
from automl.compress.prune import PruneStage, has_pruning_leftovers, sparsity
from automl.compress.quantize import QuantizeStage, is_quantized, quantize_model

__all__ = [
    "STAGES",
    "ChainResult",
    "Context",
    "DistillStage",
    "ExportResult",
    "Measurement",
    "OnnxExport",
    "OnnxInt8",
    "OnnxModel",
    "PruneStage",
    "QuantizeStage",
    "Stage",
    "StageOutput",
    "StageRecord",
    "distillation_loss",
    "export_checked",
    "export_model",
    "export_onnx",
    "fit_shapes",
    "has_pruning_leftovers",
    "is_quantized",
    "load_model",
    "load_state_dict_file",
    "make_context",
    "make_stage",
    "measure",
    "predict",
    "quantize_model",
    "quantize_onnx",
    "rebuild",
    "run_chain",
    "sparsity",
    "train",
]
