"""Transfer HPO: a sweep that starts from earlier studies and lets them fade when they do
not fit (:class:`TransferSampler`), and RUSH's rung thresholds (:class:`RushPolicy`).

Pure of Ray. The sources are plain data (:class:`SourceStudy`: each earlier trial's
parameters, already replayed into this sweep's space, and its learning curve); reading them
from run directories or Optuna storages is the nightly layer's job
(``automl.nightly._sources``).

The method, and why (issue 43's anchors, combined):

* **A model per source, learning curves as rows.** Each source gets a random forest
  (scikit-learn's) over the encoded parameters plus ``log(epoch) / log(max epoch)`` (the
  budget-as-input of SMAC/FABOLAS, Klein et al. 2017, as our :class:`ForestSampler`),
  fitted on the source's values turned into quantiles (0 = its best, 1 = its worst). The
  quantile transform is CTS's (Salinas et al., ICML 2020): values of different tasks are
  not comparable, their ranks are.
* **Weights from how well a source ranks this sweep's own trials** (RGPE, Feurer et al.
  2018, "Scalable Meta-Learning for Bayesian Optimization using Ranking-Weighted Gaussian
  Process Ensembles"; TST-R, Wistuba et al. 2016, ranks the same way). Every pair of
  finished trials of this sweep is compared at the deepest epoch both reached; a model
  mis-ranks the pair when its predictions at that epoch order them the other way. The
  competitors are the sources and the sweep's own forest (out-of-bag predictions, a
  leave-one-out stand-in; a chance ranker while fewer than ``min_target`` trials finished).
  ``bootstrap`` resamples of the trials decide: a model's weight is the share of resamples
  in which it mis-ranks the fewest pairs. A source is dropped (weight 0) as RGPE does, once
  its median loss exceeds the 95th percentile of the sweep's own model's loss, and, our
  rule, as soon as it ranks the pairs no better than chance (Kendall's tau <= 0). What the
  sources lose goes to the sweep's own model.
* **When.** The weights are measured again once the finished trials grew by a tenth
  since the last time (every trial while fewer than 20 finished), so a long sweep does not
  pay the bootstrap and the own forest on every trial.
* **Who proposes.** Trial ``n`` is the sources' turn with probability equal to the
  sources' total weight (a draw from ``default_rng([seed, n, 7])``), otherwise the inner
  sampler's (the no-transfer portfolio, :func:`automl.search.make_sampler`), which is told
  of every trial either way. So once every source mis-ranks the sweep, the sweep is the
  no-transfer search with a few extra trials in its history.
* **What the sources propose.** A greedy portfolio (Wistuba et al. 2015, "Sequential
  Model-free Hyperparameter Tuning"; Pfisterer et al. 2018, "Learning Multiple Defaults
  for Machine Learning Algorithms"), weighted: among candidates (each source's best
  ``pool_top`` configurations and ``pool_random`` random ones), the one that most lowers
  the weighted sum over sources of the best predicted quantile among the trials asked so
  far. Before any trial the weights are equal, so the first ``portfolio`` trials are the
  zero-shot portfolio; when no candidate lowers it any more, the inner sampler proposes.
* **Learning curves of the sources** enter the models (rows per epoch), the ranking (pairs
  compared at low epochs use the sources' predictions at those epochs), and RUSH's rung
  thresholds (:class:`RushPolicy`, Zappella et al. 2021).

Without sources the sampler hands every call to ``inner``: the sweep is the no-transfer
sweep, trial for trial (``tests/test_transfer.py``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from automl.search._asha import CONTINUE, STOP, RungPolicy
from automl.search._forest import decode, encode

#: the study user attribute the sampler keeps its record in (the summary's ``transfer_hpo``)
RECORD_KEY = "automl.transfer"
#: user attributes of trials that are not this sweep's own observations
_NOT_OWN = ("previous_number", "automl.duplicate_of")
_DONE = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class SourceStudy:
    """One earlier study, as the transfer sampler reads it.

    Attributes:
        name: how the summary names it (a run directory, ``URL#study``).
        params: per trial, its parameters in this sweep's space (``{name: value}``).
        curves: per trial, ``{epoch: value}`` (its learning curve; a completed trial
            without intermediate values: its value at the source's last epoch).
        mode: ``"max"`` or ``"min"``: the source's direction.
        distributions: this sweep's distributions of the parameters the trials share.

    Raises:
        ValueError: ``params`` and ``curves`` differ in length, a curve is empty, or
            ``mode`` is neither ``"max"`` nor ``"min"``.
    """

    name: str
    params: tuple[dict[str, Any], ...]
    curves: tuple[dict[int, float], ...]
    mode: str
    distributions: Mapping[str, BaseDistribution]

    def __post_init__(self):
        if len(self.params) != len(self.curves):
            raise ValueError(f"source {self.name}: {len(self.params)} trials' params but "
                             f"{len(self.curves)} curves")
        if self.mode not in ("max", "min"):
            raise ValueError(f"source {self.name}: mode must be 'max' or 'min', got "
                             f"{self.mode!r}")
        if any(not c for c in self.curves):
            raise ValueError(f"source {self.name}: a trial without any value")

    @property
    def max_epoch(self) -> int:
        """The deepest epoch any of its trials reached (>= 1)."""
        return max([1, *(max(c) for c in self.curves)])


def shared_space(sources: Sequence[SourceStudy]) -> dict[str, BaseDistribution]:
    """The parameters every source's every trial has, with one distribution each (not
    single-valued), in a stable order; what the transfer models and proposes."""
    if not sources:
        return {}
    names = set.intersection(*(set(p) for s in sources for p in s.params)) if any(
        s.params for s in sources) else set()
    out = {}
    for name in sorted(names):
        dists = {repr(s.distributions.get(name)) for s in sources}
        dist = sources[0].distributions.get(name)
        if dist is not None and len(dists) == 1 and not dist.single():
            out[name] = dist
    return out


def _quantiles(costs: np.ndarray) -> np.ndarray:
    """Each cost's quantile among ``costs`` (0 = the smallest, 1 = the largest; ties share
    their mean rank)."""
    from scipy.stats import rankdata

    if len(costs) < 2:
        return np.zeros(len(costs))
    return (rankdata(costs) - 1.0) / (len(costs) - 1.0)


def _forest(rows: np.ndarray, values: np.ndarray, n_trees: int, seed: int, oob: bool = False):
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=n_trees, max_features=5 / 6, bootstrap=True,
                                 oob_score=oob, n_jobs=1, random_state=seed).fit(rows, values)


class TransferSampler(BaseSampler):
    """Transfer from earlier studies around a no-transfer sampler (the module doc has the
    method and its sources).

    Args:
        inner: the no-transfer sampler (:func:`automl.search.make_sampler`); it samples
            every trial that is not the sources' turn and every parameter the sources do
            not share, and it is told of every trial.
        sources: the earlier studies (may be empty: then every call goes to ``inner``).
        max_epoch: the epochs of one full training in this sweep (the last rung; the
            epoch feature is ``log(epoch) / log(max_epoch)``, each source's with its own).
        mode: this sweep's direction, ``"max"`` or ``"min"``.
        seed: seeds the draws of turns, bootstraps, forests and random candidates.
        portfolio: the most trials the sources propose before ``min_trials`` trials
            finished (the zero-shot portfolio; 0: none).
        min_trials: finished trials before the sources are weighed on them (>= 2).
        min_target: finished trials before the sweep's own forest competes (below it, a
            chance ranker stands in; >= 3).
        bootstrap: resamples of the trials that decide the weights (>= 10).
        n_trees: trees of each source's forest.
        own_trees: trees of the sweep's own forest (refitted at each proposal).
        max_pairs: pairs of finished trials compared at most (a random subset beyond).
        min_gain: the least lowering of the weighted best predicted quantile (0..1) for
            which the sources still propose; below it the inner sampler does.
        pool_top: each source's best configurations among the candidates.
        pool_random: random configurations among the candidates.

    Raises:
        ValueError: an argument outside the ranges above, or sources that share no
            parameter with a distribution.
    """

    def __init__(self, inner: BaseSampler, sources: Sequence[SourceStudy], max_epoch: int,
                 mode: str = "max", seed: int | None = None, portfolio: int = 3,
                 min_trials: int = 3, min_target: int = 5, bootstrap: int = 50,
                 n_trees: int = 16, pool_top: int = 8, pool_random: int = 256,
                 own_trees: int = 12, max_pairs: int = 3000, min_gain: float = 0.01):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if max_epoch < 1:
            raise ValueError(f"max_epoch must be >= 1 epoch, got {max_epoch}")
        if portfolio < 0:
            raise ValueError(f"portfolio must be >= 0 trials, got {portfolio}")
        if (min_trials < 2 or min_target < 3 or bootstrap < 10 or n_trees < 1
                or own_trees < 4 or max_pairs < 10):
            raise ValueError("need min_trials >= 2, min_target >= 3, bootstrap >= 10, "
                             "n_trees >= 1, own_trees >= 4 and max_pairs >= 10, got "
                             f"{min_trials}, {min_target}, {bootstrap}, {n_trees}, "
                             f"{own_trees}, {max_pairs}")
        self.inner, self.sources = inner, list(sources)
        self.max_epoch, self.mode = int(max_epoch), mode
        self.seed = 0 if seed is None else int(seed)
        self.portfolio, self.min_trials, self.min_target = portfolio, min_trials, min_target
        self.bootstrap, self.n_trees = bootstrap, n_trees
        self.own_trees, self.max_pairs, self.min_gain = own_trees, max_pairs, float(min_gain)
        self.space = shared_space(self.sources)
        if self.sources and not self.space:
            raise ValueError("the sources share no searched parameter with this sweep "
                             f"({', '.join(s.name for s in self.sources)})")
        self._pool_top, self._pool_random = pool_top, pool_random
        self._models: list | None = None  # fitted on first use
        self._cache: dict[tuple, np.ndarray] = {}  # (params key, epoch feature) -> (S,)
        self._proposals: dict[int, dict[str, Any]] = {}  # trial number -> proposal
        self._record: dict[str, Any] | None = None
        self._last: tuple[int, dict] | None = None  # (finished trials, weights then)

    # -- the sources' models -----------------------------------------------------------------
    def _encode(self, params: Mapping[str, Any]) -> list[float]:
        return [encode(d, params[n]) for n, d in self.space.items()]

    def _fit(self) -> None:
        """Fit one forest per source and build the candidate pool (once)."""
        if self._models is not None:
            return
        self._models = []
        pool: dict[tuple, dict[str, Any]] = {}
        for k, s in enumerate(self.sources):
            sign = -1.0 if s.mode == "max" else 1.0
            scale = math.log(s.max_epoch) if s.max_epoch > 1 else 1.0
            rows, costs, configs = [], [], []
            for params, curve in zip(s.params, s.curves, strict=True):
                if not all(n in params for n in self.space):
                    continue
                x = self._encode(params)
                configs.append((x, params))
                for epoch, value in curve.items():
                    if value is None or math.isnan(value):
                        continue
                    rows.append([*x, math.log(max(int(epoch), 1)) / scale])
                    costs.append(sign * float(value))
            if len(rows) < 2:
                self._models.append(None)
                continue
            model = _forest(np.asarray(rows), _quantiles(np.asarray(costs)), self.n_trees,
                            _seed32(self.seed, k))
            self._models.append(model)
            finals = model.predict(np.asarray([[*x, 1.0] for x, _ in configs]))
            for j in np.argsort(finals, kind="stable")[:self._pool_top]:
                params = {n: configs[j][1][n] for n in self.space}
                pool.setdefault(_key(params), params)
        rng = np.random.default_rng([self.seed, 3])
        for u in rng.random((self._pool_random, len(self.space))):
            params = {n: d.choices[min(int(u[j] * len(d.choices)), len(d.choices) - 1)]
                      if isinstance(d, CategoricalDistribution) else decode(d, u[j])
                      for j, (n, d) in enumerate(self.space.items())}
            pool.setdefault(_key(params), params)
        self._pool = list(pool.values())
        self._pool_keys = list(pool)
        x = np.asarray([[*self._encode(p), 1.0] for p in self._pool])
        self._pool_pred = self._predict_rows(x)  # (S, C)

    def _predict_rows(self, rows: np.ndarray) -> np.ndarray:
        """Every source's predicted quantile of ``rows`` (``(R, d + 1)``): ``(S, R)``; a
        source without a model predicts 0.5 everywhere."""
        out = np.full((len(self.sources), len(rows)), 0.5)
        if len(rows):
            x32 = np.ascontiguousarray(rows, dtype=np.float32)
            for k, model in enumerate(self._models):
                if model is not None:
                    out[k] = _tree_mean(model, x32)
        return out

    def _predict(self, params: Sequence[Mapping[str, Any]], feats: Sequence[float]) -> np.ndarray:
        """``(S, len(params))`` predictions at the epoch features ``feats``, cached."""
        keys = [(_key({n: p[n] for n in self.space}), round(float(f), 9))
                for p, f in zip(params, feats, strict=True)]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        if missing:
            rows = np.asarray([[*self._encode(params[i]), float(feats[i])] for i in missing])
            pred = self._predict_rows(rows)
            for j, i in enumerate(missing):
                self._cache[keys[i]] = pred[:, j]
        if not keys:
            return np.zeros((len(self.sources), 0))
        return np.stack([self._cache[key] for key in keys], axis=1)

    # -- weights -------------------------------------------------------------------------------
    def _own(self, study: Study) -> list[FrozenTrial]:
        """This sweep's finished trials with the shared parameters and a curve."""
        out = []
        for t in study.get_trials(deepcopy=False, states=_DONE):
            if any(a in t.user_attrs for a in _NOT_OWN):
                continue
            if not all(n in t.params for n in self.space):
                continue
            if _curve(t):
                out.append(t)
        return out

    def weights(self, study: Study) -> dict[str, Any]:
        """The sources' weights now, from this sweep's finished trials.

        Returns:
            ``{"sources": [weight per source], "own": weight of the sweep's own model,
            "tau": [Kendall's tau per source over the pairs, None before any],
            "dropped": [source names], "trials": finished trials used, "pairs": pairs
            compared}``; before ``min_trials`` trials finished the weights are equal and
            ``own`` is 0. At most ``max_pairs`` pairs (drawn at random) are compared.
        """
        self._fit()
        S = len(self.sources)
        trials = self._own(study)
        blank = {"sources": [1.0 / S] * S, "own": 0.0, "tau": [None] * S, "dropped": [],
                 "trials": len(trials), "pairs": 0}
        if len(trials) < self.min_trials:
            return blank
        sign = -1.0 if self.mode == "max" else 1.0
        curves = [_curve(t) for t in trials]
        epochs = sorted({e for c in curves for e in c})
        col = {e: k for k, e in enumerate(epochs)}
        V = np.full((len(trials), len(epochs)), np.nan)  # (n, E): costs
        for i, c in enumerate(curves):
            for e, v in c.items():
                V[i, col[e]] = sign * v
        deepest = np.asarray([col[max(c)] for c in curves])
        pi, pj = np.triu_indices(len(trials), 1)
        pk = np.minimum(deepest[pi], deepest[pj])  # each pair at the deepest epoch both reached
        d = V[pi, pk] - V[pj, pk]
        keep = np.isfinite(d) & (d != 0)
        pi, pj, pk, d = pi[keep], pj[keep], pk[keep], d[keep]
        if len(d) > self.max_pairs:
            pick = np.sort(np.random.default_rng([self.seed, len(trials), 13]).choice(
                len(d), self.max_pairs, replace=False))
            pi, pj, pk, d = pi[pick], pj[pick], pk[pick], d[pick]
        if not len(d):
            return blank
        y = np.sign(d)  # +1: trial pi costs more than trial pj
        scale = math.log(self.max_epoch) if self.max_epoch > 1 else 1.0
        feats = np.asarray([math.log(max(e, 1)) / scale for e in epochs])
        combos = np.unique(np.concatenate([pi, pj]) * len(epochs) + np.concatenate([pk, pk]))
        pred = self._predict([trials[c // len(epochs)].params for c in combos],
                             feats[combos % len(epochs)])  # (S, combos)
        where = {int(c): j for j, c in enumerate(combos)}
        a = pred[:, [where[int(i * len(epochs) + k)] for i, k in zip(pi, pk, strict=True)]]
        b = pred[:, [where[int(j * len(epochs) + k)] for j, k in zip(pj, pk, strict=True)]]
        disc = _discordance(a - b, y)  # (S, P)
        own = self._own_discordance(trials, V, epochs, feats, pi, pj, pk, y)
        rng = np.random.default_rng([self.seed, len(trials), 11])
        counts = rng.multinomial(len(trials), np.full(len(trials), 1.0 / len(trials)),
                                 size=self.bootstrap)  # (R, n)
        pair_w = (counts[:, pi] * counts[:, pj]).astype(float)  # (R, P)
        loss = np.concatenate([pair_w @ disc.T, (pair_w @ own)[:, None]], axis=1)  # (R, S+1)
        best = np.isclose(loss, loss.min(axis=1, keepdims=True))
        w = (best / best.sum(axis=1, keepdims=True)).mean(axis=0)
        tau = 1.0 - 2.0 * disc.mean(axis=1)
        dropped = [k for k in range(S) if tau[k] <= 0]
        if len(trials) >= self.min_target:
            q95 = np.percentile(loss[:, S], 95)
            dropped += [k for k in range(S) if np.median(loss[:, k]) > q95 and k not in dropped]
        for k in dropped:
            w[S] += w[k]
            w[k] = 0.0
        return {"sources": [float(v) for v in w[:S]], "own": float(w[S]),
                "tau": [round(float(t), 4) for t in tau],
                "dropped": [self.sources[k].name for k in sorted(dropped)],
                "trials": len(trials), "pairs": int(len(d))}

    def _own_discordance(self, trials, V, epochs, feats, pi, pj, pk, y) -> np.ndarray:
        """The sweep's own forest's discordance per pair (``(P,)``): out-of-bag predictions
        at each pair's epoch (rows: every trial at the epochs pairs are compared at); 0.5
        (chance) below ``min_target`` trials, or for a row no tree left out of its bag."""
        if len(trials) < self.min_target:
            return np.full(len(y), 0.5)
        used = np.unique(pk)
        rows, costs, where = [], [], {}
        for i, t in enumerate(trials):
            x = self._encode(t.params)
            for k in used:
                if np.isfinite(V[i, k]):
                    where[(i, int(k))] = len(rows)
                    rows.append([*x, feats[k]])
                    costs.append(V[i, k])
        import warnings

        with warnings.catch_warnings():  # a row never out of bag has no prediction
            warnings.simplefilter("ignore")
            model = _forest(np.asarray(rows), np.asarray(costs), self.own_trees,
                            _seed32(self.seed, 10**6 + len(trials)), oob=True)
        oob = np.asarray(model.oob_prediction_, dtype=float).reshape(len(rows))
        a = oob[[where[(int(i), int(k))] for i, k in zip(pi, pk, strict=True)]]
        b = oob[[where[(int(j), int(k))] for j, k in zip(pj, pk, strict=True)]]
        out = _discordance((a - b)[None, :], y)[0]
        return np.where(np.isfinite(a) & np.isfinite(b), out, 0.5)

    # -- proposals -----------------------------------------------------------------------------
    def _propose(self, study: Study, number: int) -> dict[str, Any] | None:
        """The sources' proposal for trial ``number``, or None when it is ``inner``'s turn."""
        record = self._load_record(study)
        n = len(self._own(study))
        if self._last is None or n - self._last[0] >= max(1, self._last[0] // 10):
            self._last = (n, self.weights(study))  # again after 10% more finished trials
        w = self._last[1]
        blind = w["trials"] < self.min_trials
        share = sum(w["sources"])
        if blind:
            turn = sum(1 for n in record["transfer"] if n < number) < self.portfolio
        else:
            turn = bool(np.random.default_rng([self.seed, number, 7]).random() < share)
        proposal = None
        if turn and share > 0:
            proposal = self._best_candidate(study, np.asarray(w["sources"]) / share)
        (record["transfer"] if proposal is not None else record["inner"]).append(number)
        record["weights"] = {s.name: round(v, 4) for s, v in zip(self.sources, w["sources"],
                                                                strict=True)}
        record["own"] = round(w["own"], 4)
        record["dropped"], record["tau"] = w["dropped"], w["tau"]
        if not blind:
            record["history"] = [*record["history"][-49:],
                                 {"trial": number, "finished": w["trials"],
                                  "weights": [round(v, 4) for v in w["sources"]],
                                  "own": round(w["own"], 4)}]
        study.set_user_attr(RECORD_KEY, record)
        return proposal

    def _best_candidate(self, study: Study, w: np.ndarray) -> dict[str, Any] | None:
        """The weighted greedy-portfolio step (module doc); None when no untried candidate
        lowers the weighted best predicted quantile by more than ``min_gain``."""
        asked = [t for t in study.get_trials(deepcopy=False)
                 if all(n in t.params for n in self.space)
                 and "previous_number" not in t.user_attrs]
        tried = {_key({n: t.params[n] for n in self.space}) for t in asked}
        if asked:
            best = self._predict([t.params for t in asked], [1.0] * len(asked)).min(axis=1)
        else:
            best = self._pool_pred.max(axis=1)
        gain = (w[:, None] * np.maximum(0.0, best[:, None] - self._pool_pred)).sum(axis=0)
        for c in np.argsort(-gain, kind="stable"):
            if gain[c] <= self.min_gain:
                return None
            if self._pool_keys[c] not in tried:
                return dict(self._pool[c])
        return None

    def _load_record(self, study: Study) -> dict[str, Any]:
        if self._record is None:
            held = study.user_attrs.get(RECORD_KEY) or {}
            self._record = {"sources": [{"name": s.name, "trials": len(s.params)}
                                        for s in self.sources],
                            "transfer": list(held.get("transfer", [])),
                            "inner": list(held.get("inner", [])),
                            "history": list(held.get("history", [])),
                            "weights": {}, "own": 0.0, "dropped": [], "tau": []}
        return self._record

    # -- the sampler interface ---------------------------------------------------------------
    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if (not self.sources or len(study.directions) > 1
                or "fixed_params" in trial.system_attrs):  # an enqueued trial: fixed already
            return self.inner.infer_relative_search_space(study, trial)
        if trial.number not in self._proposals:
            self._proposals[trial.number] = self._propose(study, trial.number)
        if self._proposals[trial.number] is None:
            return self.inner.infer_relative_search_space(study, trial)
        return dict(self.space)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        proposal = self._proposals.get(trial.number) if self.sources else None
        if proposal is None:
            return self.inner.sample_relative(study, trial, search_space)
        return {n: v for n, v in proposal.items() if n in search_space}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._proposals.pop(trial.number, None)
        self.inner.after_trial(study, trial, state, values)


def _tree_mean(model, x32: np.ndarray) -> np.ndarray:
    """A fitted forest's prediction (the mean over its trees, what ``predict`` returns),
    read from each tree's documented ``tree_`` without ``predict``'s per-call checks and
    thread pool: 33 sources asked once per trial made those dominate."""
    total = np.zeros(len(x32))
    for est in model.estimators_:
        total += np.asarray(est.tree_.predict(x32)).reshape(len(x32), -1)[:, 0]
    return total / len(model.estimators_)


def _curve(t: FrozenTrial) -> dict[int, float]:
    """A trial's ``{epoch: value}`` (its value at epoch 1 when it reported none)."""
    curve = {int(e): float(v) for e, v in t.intermediate_values.items()
             if v is not None and not math.isnan(v)}
    if not curve and t.state == TrialState.COMPLETE and t.value is not None:
        curve = {1: float(t.value)}
    return curve


def _discordance(diff: np.ndarray, label: np.ndarray) -> np.ndarray:
    """1 where a predicted difference orders a pair against ``label``, 0.5 on a tie."""
    s = np.sign(diff) * label[None, :]
    return np.where(s < 0, 1.0, np.where(s == 0, 0.5, 0.0))


def _key(params: Mapping[str, Any]) -> tuple:
    def norm(v):
        return float(f"{v:.12g}") if isinstance(v, float) else v
    return tuple(sorted((k, norm(v)) for k, v in params.items()))


def _seed32(seed: int, k: int) -> int:
    return int(np.random.default_rng([seed, k, 5]).integers(2**31))


def direction_of(study: Study) -> str:
    """``"max"`` or ``"min"`` of a one-objective study."""
    return "max" if study.direction == StudyDirection.MAXIMIZE else "min"


class RushPolicy:
    """RUSH's rung rule (Zappella et al. 2021, "Resource-Aware Asynchronous Online
    Hyperband with Warm Starts", arXiv 2110.10005; Syne Tune's ``RUSHScheduler``, removed
    after 0.14.2) on our :class:`RungPolicy`: the ``anchors`` (trials that run the
    sources' best configurations) are judged by ``policy`` alone; every other trial must
    also, at each rung epoch (:meth:`RungPolicy.rung_epochs`) below ``max_t``, be at least as
    good as the best value an anchor reported at that epoch, else it stops.

    Same interface as :class:`RungPolicy` for what a driver calls (:meth:`on_report`,
    :meth:`rung_epochs`, ``max_t``, ``reduction_factor``, :meth:`bracket_of`); everything
    else is read from ``policy``.

    Args:
        policy: the rung policy (one objective).
        anchors: trial keys whose values set the thresholds.

    Raises:
        ValueError: ``policy`` judges several objectives.
    """

    def __init__(self, policy: RungPolicy, anchors: Sequence[Hashable] = ()):
        if policy.multi_objective:
            raise ValueError("RUSH thresholds need one objective")
        self.policy, self.anchors = policy, set(anchors)
        self._sign = 1.0 if policy.mode == "max" else -1.0
        self.thresholds: dict[int, float] = {}  # epoch -> the best anchor value (signed)
        self.rung_epochs_set = set(policy.rung_epochs())

    def __getattr__(self, name: str):
        if name == "policy":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.policy, name)

    def add_anchor(self, trial: Hashable) -> None:
        """Make ``trial`` an anchor (before its first report)."""
        self.anchors.add(trial)

    def on_report(self, trial: Hashable, epoch: int, value: float | None,
                  violation: float = 0.0) -> str:
        """The policy's decision, then RUSH's threshold at a rung epoch (class doc)."""
        decision = self.policy.on_report(trial, epoch, value, violation)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return decision
        signed = self._sign * float(value)
        if trial in self.anchors:
            if int(epoch) in self.rung_epochs_set or epoch >= self.policy.max_t:
                self.thresholds[int(epoch)] = max(self.thresholds.get(int(epoch), -math.inf),
                                                  signed)
            return decision
        if (decision == CONTINUE and int(epoch) in self.rung_epochs_set and epoch < self.policy.max_t
                and signed < self.thresholds.get(int(epoch), -math.inf)):
            return STOP
        return decision


__all__ = ["RECORD_KEY", "RushPolicy", "SourceStudy", "TransferSampler", "direction_of",
           "shared_space"]
