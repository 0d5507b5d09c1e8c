"""Knowledge distillation (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a
Neural Network", arXiv:1503.02531).

The incoming model is the teacher; the student is built from the spec's ``student`` arch
(``ctx.build``) and, when it has fewer parameters than the teacher (else the stage is
skipped), trained from scratch on the train split with

    loss = alpha * T**2 * KL(softmax(teacher / T) || softmax(student / T))
           + (1 - alpha) * CE(student, y)

(the T**2 factor keeps the soft-target gradients on the scale of the hard ones, as in
the paper). Teacher logits are computed once, in eval mode, before training; the
student is initialised after ``torch.manual_seed(ctx.seed)``.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from automl.compress._base import (
    Context,
    StageOutput,
    agreement_of,
    check_number,
    predict,
    train,
)
from automl.compress.export import shapes_of


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor, y: Tensor,
                      temperature: float, alpha: float, task: str = "classification",
                      student: nn.Module | None = None) -> Tensor:
    """Hinton et al. 2015 loss (module docstring). Logits ``(B, K)``, ``y`` int64 ``(B,)``;
    KL is the batch mean (``reduction="batchmean"``). For regression the student matches
    the teacher's ``(B, 1)`` outputs and the float targets, both standardised by the
    ``student``'s head (:meth:`automl.task.Task.distill_loss`). Returns a scalar tensor."""
    from automl.task import task_of

    return task_of(task).distill_loss(student_logits, teacher_logits, y, temperature, alpha,
                                      model=student)


class DistillStage:
    """Distill stage. Params: ``student`` (arch dict for ``ctx.build``, e.g.
    ``{"family": "resnet", "width": 8}``, or an ``nn.Module`` to copy), ``temperature`` >
    0 (default 4), ``alpha`` in [0, 1] (default 0.7), ``epochs`` >= 1 (default 30), ``lr``
    (default ``ctx.lr``). Raises ``ValueError`` naming a bad key."""

    name = "distill"

    def __init__(self, student: dict | nn.Module, temperature: float = 4.0, alpha: float = 0.7,
                 epochs: int = 30, lr: float | None = None):
        if isinstance(student, dict):
            if "family" not in student:
                raise ValueError(f"student: arch dict needs a 'family' key; got {student!r}")
        elif not isinstance(student, nn.Module):
            raise ValueError(f"student: expected an arch dict or nn.Module; got {student!r}")
        self.student = student
        self.temperature = check_number("temperature", temperature, 0, 1e3, lo_open=True)
        self.alpha = check_number("alpha", alpha, 0, 1)
        self.epochs = check_number("epochs", epochs, 1, 100_000, integer=True)
        self.lr = None if lr is None else check_number("lr", lr, 0, 1, lo_open=True)

    def run(self, model: nn.Module, ctx: Context) -> StageOutput:
        teacher = copy.deepcopy(model).eval()
        if isinstance(self.student, dict):
            torch.manual_seed(ctx.seed)  # the student's init depends on the seed only
            try:
                student = ctx.build(dict(self.student))
            except ValueError as err:
                raise ValueError(f"student: {err}") from None
        else:
            student = copy.deepcopy(self.student)
        n_t = sum(p.numel() for p in teacher.parameters())
        n_s = sum(p.numel() for p in student.parameters())
        if n_s >= n_t:
            return StageOutput(skipped=f"the student has {n_s:,} parameters, not fewer than "
                                       f"the teacher's {n_t:,}; declare a smaller student")
        teacher_train = predict(teacher, ctx.X_train).detach()

        def loss_fn(logits: Tensor, yb: Tensor, idx: Tensor) -> Tensor:
            return distillation_loss(logits, teacher_train[idx].to(logits.device), yb,
                                     self.temperature, self.alpha, ctx.task, student)

        train(student, ctx.X_train, ctx.y_train, epochs=self.epochs, lr=self.lr or ctx.lr,
              batch_size=ctx.batch_size, seed=ctx.seed, loss_fn=loss_fn, device=ctx.device)
        t_val = predict(teacher, ctx.X_val)  # validation rows: the test split is kept for
        s_val = predict(student, ctx.X_val)  # the final measurement
        info = {"teacher_params": n_t, "student_params": n_s,
                "param_reduction": n_t / n_s if n_s else float("inf"),
                "val_agreement_with_stage_teacher": agreement_of(s_val, t_val, ctx.task)
                if len(t_val) else None,
                "temperature": self.temperature, "alpha": self.alpha, "epochs": self.epochs}
        arch = dict(self.student) if isinstance(self.student, dict) else None
        recipe = {"arch": arch, "shapes": shapes_of(student), "pruned": None, "quantized": None}
        return StageOutput(model=student, info=info, recipe=recipe)
