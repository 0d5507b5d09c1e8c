"""The ``nightly`` section of the spec: warm start, transfer learning and champion /
challenger promotion for sweeps that run again and again (``automl.nightly``).

One section of the spec package; ``automl.spec`` re-exports :class:`NightlySpec`. Like
the rest of the spec it imports neither torch nor ray.

Example::

    registry: {name: digits-nightly}
    nightly:
      warm_start: digits-nightly@champion   # or a run directory: runs/nightly-2026-11-29
      warm_start_top_k: 3                   # the previous top 3 configurations run first
      transfer: false                       # true: trials of the champion's architecture
                                            # start from its weights and fine-tune
      promote: true                         # champion / challenger
      champion_margin: 0.002                # promote only if the paired mean CV gain >= this
      transfer_from:                        # transfer HPO: earlier studies inform the sampler
        - runs/customer-a                   # a run directory (its study.db)
        - {storage: "sqlite:///sweeps/b.db", study: customer-b}   # an Optuna study
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransferSource(_Strict):
    """One earlier study the sampler transfers from (``nightly.transfer_from``): a run
    directory, or an Optuna storage URL with the study's name. Written as a plain string,
    it is a run directory."""

    #: a finished run directory: its ``study.db`` (the study named as its spec) is read
    run_dir: str | None = Field(None, min_length=1)
    #: an Optuna storage URL (``sqlite:///path/study.db``, ``postgresql://...``); needs
    #: ``study``
    storage: str | None = Field(None, min_length=1)
    #: the study's name in ``storage`` (with ``run_dir``: when its study.db holds several)
    study: str | None = Field(None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, v: Any) -> Any:
        if isinstance(v, str):
            if "://" in v:
                raise ValueError(f"{v!r} is a storage URL; write {{storage: {v}, study: "
                                 "NAME}")
            return {"run_dir": v}
        return v

    @model_validator(mode="after")
    def _one(self) -> TransferSource:
        if (self.run_dir is None) == (self.storage is None):
            raise ValueError("give either run_dir (a run directory) or storage (an Optuna "
                             "storage URL) with study")
        if self.storage is not None and self.study is None:
            raise ValueError(f"storage {self.storage} needs study: the name of the study "
                             "in it")
        if self.storage is not None and "://" not in self.storage:
            raise ValueError(f"storage {self.storage!r} is not a URL; use "
                             "sqlite:///path/study.db, or run_dir for a run directory")
        return self

    @property
    def label(self) -> str:
        """How the summary names it: the run directory, or ``URL#study``."""
        if self.run_dir is not None:
            return self.run_dir + (f"#{self.study}" if self.study else "")
        return f"{self.storage}#{self.study}"


class NightlySpec(_Strict):
    """How a sweep builds on the previous one and when its winner replaces the champion.

    ``warm_start``: a previous run directory, or a registry reference (``NAME@champion``,
    ``NAME@3``, ``NAME``) whose recorded run directory is used; a reference that does not
    exist yet (the first night) starts cold with a warning. The previous run's top
    ``warm_start_top_k`` configurations (its CV winner first) are evaluated first, and with
    ``warm_start_history`` every finished trial of its Optuna study whose parameters fit
    this spec's space is added to the new study, so the sampler starts informed.

    ``transfer``: trials whose architecture matches the champion's (``champion_alias`` of
    ``registry.name``) start from the champion's weights; cross-validation and the final
    refit still train from scratch, so scores stay comparable.

    ``transfer_from``: transfer HPO. Earlier studies (other customers' or data slices'
    sweeps, earlier nights) whose finished trials, learning curves included, inform this
    sweep's sampler (``automl.search._transfer.TransferSampler``): the first
    ``transfer_portfolio`` trials run the sources' zero-shot portfolio, then each source
    weighs as much as it ranks this sweep's own trials well, and a source that mis-ranks
    them drops to weight 0, leaving the no-transfer sampler in charge. The summary's
    ``transfer_hpo`` section gives each source's weight.

    ``promote``: the new CV winner is compared with the champion on the same folds (the
    champion's config is retrained on this run's folds when its scores came from other
    data or folds); it becomes the champion only if its mean paired gain in
    ``selection.metric`` is at least ``champion_margin`` (and, with ``alpha``, the paired
    t-test's one-sided p-value is below ``alpha``). The first run with no champion
    promotes its winner.
    """

    warm_start: str | None = Field(None, min_length=1)
    #: the previous run's top configurations (its CV winner first) evaluated first
    warm_start_top_k: int = Field(3, ge=0, le=100)
    #: add the previous study's finished trials that fit this spec's space to the new study
    warm_start_history: bool = True
    transfer: bool = False
    promote: bool = False
    #: the registry alias of the champion (of ``registry.name``)
    champion_alias: str = Field("champion", pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
    #: the smallest mean paired CV gain in ``selection.metric`` that promotes the new winner
    champion_margin: float = Field(0.0, ge=0, lt=1)
    #: also require the paired t-test's one-sided p-value to be below this; None: the margin
    #: alone
    alpha: float | None = Field(None, gt=0, lt=1)
    #: earlier studies whose trials inform the sampler (transfer HPO): run directories, or
    #: ``{storage: URL, study: NAME}``
    transfer_from: list[TransferSource] = Field(default_factory=list, max_length=64)
    #: with ``transfer_from``: the most first trials that run the sources' zero-shot
    #: portfolio before the sources are weighed on this sweep's own trials
    transfer_portfolio: int = Field(3, ge=0, le=50)

    @field_validator("champion_alias")
    @classmethod
    def _alias(cls, v: str) -> str:
        if v == "latest":
            raise ValueError("'latest' always means the newest version; choose another alias")
        return v

    @property
    def uses_champion(self) -> bool:
        """True when the run reads the registry's champion (transfer or promotion)."""
        return self.transfer or self.promote
