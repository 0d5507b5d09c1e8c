"""The user_model example's search, from Python: the same spec
(``examples/user_model/spec.yaml``), the same factory (``mynets.small_cnn``) passed as a
callable, and the digits given as arrays instead of named in the spec. Runs as it stands
from any working directory:

    .venv/bin/python examples/python_api/search.py [--output DIR] [--num-samples N]

It prints the winner, its test accuracy, the leaderboard and one prediction of the
winner loaded back as an ``nn.Module``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

HERE = Path(__file__).resolve().parent
SPEC = HERE.parent / "user_model" / "spec.yaml"
sys.path.insert(0, str(SPEC.parent))  # mynets lives beside the spec

import mynets  # noqa: E402

import automl  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default="runs", help="output folder (default: runs)")
    ap.add_argument("--num-samples", type=int, default=None, help="trials (default: the spec's)")
    args = ap.parse_args(argv)

    digits = load_digits()
    X = (digits.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8) in [0, 1]
    y = digits.target  # (1797,) digit labels

    result = automl.search(SPEC, model=mynets.small_cnn, data=(X, y), name="python-api",
                           output=args.output, num_samples=args.num_samples)

    summary = result.summary
    print(f"winner: trial {summary['winner']['trial_id']}, family "
          f"{result.best_config['arch']['family']}, test accuracy "
          f"{summary['test']['accuracy']:.4f}")
    print(result.leaderboard.to_string(index=False))
    model = result.load_model()
    import torch

    with torch.no_grad():
        pred = model(torch.from_numpy(X[:5])).argmax(1).tolist()
    print(f"the first 5 digits: predicted {pred}, true {y[:5].tolist()}")
    print(f"run directory: {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
