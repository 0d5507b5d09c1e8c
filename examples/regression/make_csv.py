"""Write scikit-learn's bundled diabetes data (442 patients, 10 baseline variables, and
disease progression one year later, 25-346) as ``diabetes.csv`` beside this script: a
table with a float target, as a user would bring one. No download.

    python examples/regression/make_csv.py
"""

from pathlib import Path

from sklearn.datasets import load_diabetes


def main() -> Path:
    frame = load_diabetes(as_frame=True, scaled=False).frame
    frame = frame.rename(columns={"target": "progression"})
    out = Path(__file__).resolve().parent / "diabetes.csv"
    frame.to_csv(out, index=False)
    print(f"wrote {out} ({len(frame)} rows, target 'progression')")
    return out


if __name__ == "__main__":
    main()
