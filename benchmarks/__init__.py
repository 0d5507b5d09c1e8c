"""Benchmarks against the tools users would pick instead (plain Optuna, hand-written Ray
Tune + OptunaSearch + ASHA, scikit-learn baselines). ``python -m benchmarks [--quick]
[--only NAME]`` runs them and writes ``benchmarks/results/<name>.json`` and ``.md``;
see ``benchmarks/README.md``. They measure; they are not timed tests."""
