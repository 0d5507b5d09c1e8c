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
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
