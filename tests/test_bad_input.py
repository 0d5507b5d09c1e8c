"""The bad-input corpus: malformed specs and data files. Each gives exit code 2 and one
line naming the file and key path, starts no Ray and leaves no run directory behind."""

from __future__ import annotations

import numpy as np
import pytest
from test_spec import BAD as BAD_SPECS
from typer.testing import CliRunner

from automl.cli import app


def _png(path, size=(8, 8)):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros(size, dtype=np.uint8)).save(path)


def _csv_spec(name, extra=""):
    return f"data: {{source: csv, path: {name}, target: y{extra}}}\nmodel: {{family: mlp}}\n"


# name -> (files to create {relative path: bytes | callable(path)}, spec text, pattern)
DATA = {
    "csv missing": ({}, _csv_spec("nope.csv"), r"nope\.csv: no such file"),
    "csv empty": ({"d.csv": b""}, _csv_spec("d.csv"), r"d\.csv: the file is empty"),
    "csv header only": ({"d.csv": b"a,y\n"}, _csv_spec("d.csv"), r"d\.csv: .*(no rows|empty)"),
    "csv no target column": ({"d.csv": b"a,b\n1,2\n3,4\n"}, _csv_spec("d.csv"),
                             r"d\.csv: no target column 'y'"),
    "csv not utf-8": ({"d.csv": "a,y\ncaf\xe9,1\n".encode("latin-1")}, _csv_spec("d.csv"),
                      r"d\.csv: .*(UTF-8|utf-8|decode)"),
    "csv all targets missing": ({"d.csv": b"a,y\n1,\n2,\n"}, _csv_spec("d.csv"),
                                r"d\.csv: "),
    "csv single class": ({"d.csv": b"a,y\n" + b"".join(b"%d,1\n" % i for i in range(40))},
                         _csv_spec("d.csv"), r"d\.csv: .*class"),
    "csv is a folder": ({"d.csv/x": b""}, _csv_spec("d.csv"), r"d\.csv: "),
    "parquet garbage": ({"d.parquet": b"not parquet at all"},
                        "data: {source: parquet, path: d.parquet, target: y}\nmodel: {family: mlp}\n",
                        r"d\.parquet: "),
    "npz garbage": ({"d.npz": b"PK-not-a-zip"},
                    "data: {source: npz, path: d.npz}\nmodel: {family: mlp}\n", r"d\.npz: "),
    "npz without arrays": ({"d.npz": lambda p: np.savez(p, a=np.zeros(3))},
                           "data: {source: npz, path: d.npz}\nmodel: {family: mlp}\n",
                           r"d\.npz: .*(X|y)"),
    "npz length mismatch": ({"d.npz": lambda p: np.savez(p, X=np.zeros((10, 3)), y=np.zeros(9))},
                            "data: {source: npz, path: d.npz}\nmodel: {family: mlp}\n",
                            r"d\.npz: "),
    "image folder missing": ({}, "data: {source: image_folder, path: imgs}\n", r"imgs: "),
    "image folder no classes": ({"imgs/readme.txt": b"hi"},
                                "data: {source: image_folder, path: imgs}\n", r"imgs: "),
    "unreadable image": ({"imgs/a/0.png": b"\x89PNG broken", "imgs/b/0.png": _png},
                         "data: {source: image_folder, path: imgs}\n", r"0\.png: "),
    "csv without path": ({}, "data: {source: csv, target: y}\nmodel: {family: mlp}\n",
                         r"data(\.path)?: "),
    # found once the data are read: still one line, naming the spec file and the key
    "class too small for the folds": (
        {"d.csv": b"a,y\n" + b"".join(b"%d,%d\n" % (i, i < 4) for i in range(60))},
        _csv_spec("d.csv") + "selection: {cv_folds: 5}\n",
        r"spec\.yaml: selection\.cv_folds: class '1' has \d training rows?, fewer than the 5"),
}

EXTRA_SPECS = {
    "huge trial count": ("search: {num_samples: 1000000000}\n", r"search\.num_samples"),
    "nan learning rate": ("training: {lr: .nan}\n", r"training\.lr"),
    "infinite bound": ("training:\n  lr: {type: float, low: 1e-4, high: .inf, log: true}\n",
                       r"training\.lr"),
    "test fraction above 1": ("data: {test_size: 1.5}\n", r"data\.test_size"),
    "splits leave no training rows": ("data: {test_size: 0.5, val_size: 0.45}\n",
                                      r"data: test_size \+ val_size"),
    "yaml booleans in choices": ("training:\n  optimizer: {type: categorical, choices: [on, off]}\n",
                                 r"training\.optimizer: unknown optimizer 'on'"),
    "string for a section": ("search: fast\n", r"search: "),
    "storage not a URI": ("output: {storage_uri: bucket/runs}\n", r"output\.storage_uri"),
    "fractional DDP GPUs": ("resources: {workers_per_trial: 2, gpus_per_worker: 0.5}\n",
                            r"fractional"),
    "zero workers": ("resources: {workers_per_trial: 0}\n", r"resources\.workers_per_trial"),
    "empty file": ("", None),  # valid: all defaults (checked separately below)
}


def _make(tmp_path, files):
    for rel, content in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)


def _check(tmp_path, monkeypatch, spec_text, pattern, files=None):
    import re

    import ray

    monkeypatch.chdir(tmp_path)
    _make(tmp_path, files or {})
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["search", str(spec), "--output", str(out)])
    text = result.output.strip()
    assert result.exit_code == 2, text
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("error: "), text
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists(), "a run directory was left behind"
    assert not ray.is_initialized()


@pytest.mark.parametrize("case", sorted(BAD_SPECS), ids=str)
def test_bad_spec_through_the_cli(tmp_path, monkeypatch, case):
    text, pattern = BAD_SPECS[case]
    _check(tmp_path, monkeypatch, text, pattern)


@pytest.mark.parametrize("case", sorted(k for k, v in EXTRA_SPECS.items() if v[1]), ids=str)
def test_more_bad_specs(tmp_path, monkeypatch, case):
    text, pattern = EXTRA_SPECS[case]
    _check(tmp_path, monkeypatch, text, pattern)


@pytest.mark.parametrize("case", sorted(DATA), ids=str)
def test_bad_data_files(tmp_path, monkeypatch, case):
    files, text, pattern = DATA[case]
    _check(tmp_path, monkeypatch, text, pattern, files)


def test_corpus_is_big_enough():
    assert len(BAD_SPECS) + len(EXTRA_SPECS) - 1 + len(DATA) >= 40


def test_unwritable_output_fails_before_anything_starts(tmp_path, monkeypatch):
    import ray

    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the output folder should be")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    result = CliRunner().invoke(app, ["search", str(spec), "--output", str(blocker / "runs")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 3 and len(lines) == 1, result.output
    assert "cannot write to the output folder" in lines[0] and "--output" in lines[0]
    assert not ray.is_initialized()


def test_help_shows_no_type_beside_flags():
    """``--resume`` takes no value: ``--help`` shows no ``<bool>`` beside it (typer 0.29
    labels flags so), while options that take a value keep their type."""
    out = CliRunner().invoke(app, ["search", "--help"], env={"COLUMNS": "120"}).output
    assert "--resume" in out and "<bool>" not in out
    assert "<int range>" in out  # --num-samples still says what it takes
