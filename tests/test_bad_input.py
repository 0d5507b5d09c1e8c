"""The bad-input corpus: malformed specs and data files. Each gives exit code 2 and one
line naming the file and key path, starts no Ray and leaves no run directory behind."""

from __future__ import annotations

import numpy as np
import pytest
from test_spec import BAD as BAD_SPECS
from typer.testing import CliRunner

from automl.cli import app


def _png(path, size=(8, 8), value=0):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full(size, value, dtype=np.uint8)).save(path)


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


# --------------------------------------------------------------------------- issue 45, inputs
def _validate(tmp_path, monkeypatch, spec_text, files=None):
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, files or {})
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    return CliRunner().invoke(app, ["validate", str(spec)])


@pytest.mark.parametrize("case", sorted(DATA), ids=str)
def test_validate_refuses_what_search_refuses(tmp_path, monkeypatch, case):
    """`automl validate` reads the data as `search` does before Ray starts: every bad data
    file of the corpus is one line and exit 2 there too (a missing target column said
    "valid")."""
    import re

    import ray

    files, text, pattern = DATA[case]
    result = _validate(tmp_path, monkeypatch, text, files)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and re.search(pattern, lines[0]), lines[0]
    assert not ray.is_initialized()


def test_validate_prints_the_data_line_without_importing_ray(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    code = ("import sys\nfrom automl.cli import main\nsys.argv = ['automl', 'validate', "
            f"{str(REPO / 'search_spaces' / 'resnet.yaml')!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print('ray' in sys.modules, 'torch' in sys.modules, code)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "False False 0", proc.stdout + proc.stderr
    assert lines[-2].endswith("resnet.yaml: valid")
    assert lines[-3].startswith("data   digits: 1797 rows, input (1, 8, 8), 10 classes")


SPEC_MESSAGES = {  # pydantic's "Input should be ..." in the project's one-line form
    "search:\n  num_samples: abc\n":
        r"search\.num_samples: must be a whole number, got 'abc' \(write a whole number",
    "data:\n  test_size: 1.5\n":
        r"data\.test_size: must be less than 1, got 1\.5 \(use a value below 1\)$",
    "search:\n  sampler: tpee\n":
        r"search\.sampler: must be one of 'auto', 'tpe', .*, got 'tpee' \(did you mean 'tpe'\?\)$",
    "scheduler:\n  brackets: many\n":
        r"scheduler\.brackets: must be 'auto' or a whole number, got 'many'$",
    "data:\n  dedupe: maybe\n": r"data\.dedupe: must be true or false, got 'maybe' \(write true",
    "search:\n  num_samples: 0\n": r"search\.num_samples: must be at least 1, got 0 \(use 1 or more\)",
    "search: fast\n": r"search: must be a section of keys, got 'fast' \(write search: with its keys",
    "name: ../escape\n": r"name: must be a name of letters, digits.*, got '\.\./escape' \(rename it\)",
    "data:\n  test_size: abc\n  val_size: 3\n":
        r"data\.test_size: must be a number, got 'abc' \(.*; 1 more error after this one\)$",
}


@pytest.mark.parametrize("text", sorted(SPEC_MESSAGES), ids=lambda t: t.split(":")[0])
def test_pydantic_errors_read_as_our_own(tmp_path, text):
    import re

    from conftest import write_spec

    from automl.errors import SpecError
    from automl.spec import load_spec

    path = write_spec(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = str(info.value)
    assert line.startswith(f"{path}: ") and "\n" not in line
    assert "Input should" not in line and "String should" not in line, line
    assert re.search(SPEC_MESSAGES[text], line), line


@pytest.mark.parametrize("args,pattern", [
    (["search", "{spec}", "--num-samples", "-1"],
     r"^error: invalid value for '--num-samples': .*1 \(see automl search --help\)$"),
    (["search", "{spec}", "--nam", "x"],
     r"^error: no such option: --nam; did you mean --name\? \(see automl search --help\)$"),
    (["search"], r"^error: missing argument 'spec' \(see automl search --help\)$"),
    (["registry", "show"], r"^error: missing argument 'ref' \(see automl registry show --help\)$"),
    (["serch"], r"^error: no such command 'serch'; did you mean 'search'\? \(see automl --help\)$"),
], ids=["bad value", "unknown option", "missing argument", "nested command", "unknown command"])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, args, pattern):
    """Through the real entry point (`python -m automl`): no Rich box, one line on stderr,
    nothing on stdout."""
    import re
    import subprocess
    import sys

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    proc = subprocess.run([sys.executable, "-m", "automl",
                           *(a.format(spec=spec) for a in args)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(pattern, lines[0]), proc.stderr


@pytest.mark.parametrize("args", [[], ["registry"], ["--help"], ["search", "--help"]],
                         ids=["no args", "no subcommand", "--help", "search --help"])
def test_help_still_exits_0(args):
    result = CliRunner().invoke(app, args, prog_name="automl")
    assert result.exit_code == 0 and "Usage: automl" in result.output, result.output


def test_unreadable_images_are_reported_whole_and_non_images_skipped(tmp_path):
    from automl.data import load_dataset
    from automl.errors import DataError
    from automl.spec import DataSpec

    for c in "ab":
        for i in range(4):
            _png(tmp_path / "imgs" / c / f"{i}.png")
    for rel in ("a/x1.png", "a/x2.jpg", "b/x3.png", "b/x4.png", "b/x5.bmp"):
        (tmp_path / "imgs" / rel).write_bytes(b"\x89PNG broken")
    spec = DataSpec(source="image_folder", path=str(tmp_path / "imgs"))
    with pytest.raises(DataError) as info:
        load_dataset(spec)
    line = str(info.value)
    assert line.startswith(f"{tmp_path / 'imgs'}: 5 of 13 images cannot be read: "
                           "a/x1.png, a/x2.jpg, b/x3.png and 2 more"), line
    assert "remove or replace those files" in line and "\n" not in line


def test_non_image_files_are_skipped_and_counted_in_the_data_line(tmp_path):
    from automl.prepare import prepare
    from automl.spec import Experiment

    for c in "ab":
        for i in range(20):  # distinct images: duplicates would be removed
            _png(tmp_path / c / f"{i}.png", value=i + (100 if c == "b" else 0))
    (tmp_path / "a" / "notes.txt").write_text("collected in May")
    (tmp_path / "b" / "README.md").write_text("# dogs")
    (tmp_path / "b" / ".DS_Store").write_bytes(b"\0\0")
    exp = Experiment.model_validate({"data": {"source": "image_folder", "path": str(tmp_path)},
                                     "selection": {"cv_folds": 2}})
    prepared = prepare(exp)
    assert prepared.dataset.n_rows == 40
    assert prepared.info["cleaning"]["non_image_files"] == 2  # .DS_Store: hidden, not counted
    assert "; skipped 2 non-image files;" in prepared.line()


def _ids_csv(path, n=300):
    import pandas as pd

    rng = np.random.default_rng(0)
    pd.DataFrame({"customer": [f"c-{i:05d}" for i in range(n)], "x": rng.normal(size=n),
                  "colour": rng.choice(["red", "green", "blue"], n),
                  "y": np.arange(n) % 2}).to_csv(path, index=False)
    return path


def test_an_id_column_is_dropped_once_with_a_note(tmp_path):
    """300 distinct customer IDs would be 300 one-hot inputs; the column is dropped when the
    table is loaded, so the search, the refit's preprocessor and the data line agree."""
    import pandas as pd

    from automl.data import apply_preprocessor, fit_preprocessor, load_dataset
    from automl.data._files import id_columns
    from automl.prepare import prepare
    from automl.spec import Experiment

    path = _ids_csv(tmp_path / "people.csv")
    exp = Experiment.model_validate({"data": {"source": "csv", "path": str(path), "target": "y"},
                                     "model": {"family": "mlp"}})
    data = load_dataset(exp.data)
    assert list(data.frame.columns) == ["x", "colour"]
    assert data.describe()["cleaning"]["id_columns"] == {"customer": 300}
    prepared = prepare(exp)
    assert prepared.info["model_input_shape"] == [4]  # x + 3 colours, not 303
    assert "dropped ID column 'customer' (300 distinct text values" in prepared.line()
    pre = fit_preprocessor(data, np.arange(200))  # what best/preprocessor.skops holds
    raw = pd.read_csv(path).drop(columns=["y"])  # a user's raw rows, IDs included
    assert pre.transform(raw).shape == (300, 4)
    assert apply_preprocessor(pre, data, np.arange(10))[0].shape == (10, 4)
    # the rule: > 50 distinct text values, and more than half the rows
    few = pd.DataFrame({"a": [f"v{i % 40}" for i in range(300)],
                        "b": [f"v{i % 140}" for i in range(300)],
                        "c": [f"v{i % 160}" for i in range(300)]}, dtype=object)
    assert id_columns(few) == {"c": 160}


def test_reproduce_of_a_missing_folder_says_so_as_report_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = {}
    for command in ("report", "reproduce", "compress", "resume"):
        result = CliRunner().invoke(app, [command, "no-such-run"])
        assert result.exit_code == 2, result.output
        lines[command] = result.output.strip()
    assert set(lines.values()) == {"error: no-such-run: run directory does not exist (pass a "
                                   "folder written by `automl search`)"}, lines


def test_cut_list():
    from automl.errors import cut_list

    assert cut_list([]) == "none"
    assert cut_list("abcdef") == "a, b, c, d, e, f"  # "and 1 more" would be no shorter
    assert cut_list(range(200)) == "0, 1, 2, 3, 4 and 195 more"
    assert cut_list(range(10), keep=3) == "0, 1, 2 and 7 more"


def test_200_classes_make_one_short_line():
    """A float target (scikit-learn's diabetes as CSV) searched as classification: the split
    error listed every single-row class."""
    from automl.data import split_indices
    from automl.errors import DataError

    y = np.concatenate([np.arange(200), np.zeros(40, int), np.ones(40, int)])
    with pytest.raises(DataError) as info:
        split_indices(y, 0.2, 0.2, 0, classes=tuple(f"{v}.0" for v in range(200)))
    line = str(info.value)
    assert "198 of 200 classes have a single row ('2.0', '3.0', '4.0', '5.0', '6.0' and " \
           "193 more)" in line, line
    assert "'199.0'" not in line and len(line) < 400, line
    assert "regression" in line


def test_a_table_with_many_columns_names_a_few(tmp_path):
    import pandas as pd

    from automl.data import load_dataset
    from automl.errors import DataError
    from automl.spec import DataSpec

    pd.DataFrame(np.zeros((4, 30)), columns=[f"feature_{i}" for i in range(30)]).to_csv(
        tmp_path / "wide.csv", index=False)
    with pytest.raises(DataError, match=r"no target column 'label' \(columns: feature_0, "
                                        r"feature_1, feature_2, feature_3, feature_4 and 25 "
                                        r"more\)"):
        load_dataset(DataSpec(source="csv", path=str(tmp_path / "wide.csv"), target="label"))


# --------------------------------------------------------------------------- issue 41, models
_NET = ("from torch import nn\n\n\n"
        "def build(input_shape, output_size, hidden=8):\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(hidden), nn.ReLU(),\n"
        "                         nn.Linear(hidden, output_size))\n")


def _user_spec(family: str, section: str = "") -> str:
    return (f"model:\n  family: {{type: categorical, choices: [mlp, '{family}']}}\n"
            + (f"  '{family}': {section}\n" if section else ""))


# name -> ({module file: source}, spec text, pattern of the one line); each case's module has
# its own name, so modules imported by one case (in this process) do not answer another
USER_MODELS = {
    "module not found": ({}, _user_spec("nosuch_mod_i41:build"),
                         r"model\.family: cannot import 'nosuch_mod_i41' for "
                         r"nosuch_mod_i41:build: no module named 'nosuch_mod_i41' \(looked in "),
    "callable not found": ({"um_nofn.py": _NET}, _user_spec("um_nofn:biuld"),
                           r"model\.family: um_nofn \(.*um_nofn\.py\) has no 'biuld' for "
                           r"um_nofn:biuld \(did you mean 'build'\?\)"),
    "not callable": ({"um_notcall.py": _NET + "CONFIG = {'hidden': 8}\n"},
                     _user_spec("um_notcall:CONFIG"),
                     r"model\.family: um_notcall:CONFIG is a dict, not a callable"),
    "path without a colon": ({}, _user_spec("um_nocolon.build"),
                             r"model\.family: 'um_nocolon\.build' is not an import path: put ':' "
                             r"between the module and its factory, e\.g\. 'um_nocolon:build'"),
    "malformed import path": ({}, _user_spec("um-bad:build"),
                              r"model\.family: 'um-bad:build' is not an import path"),
    "signature without input_shape and output_size": (
        {"um_sig.py": "def build(hidden=8):\n    return None\n"},
        _user_spec("um_sig:build", "{hidden: 8}"),
        r"model\.family: um_sig:build\(hidden=8\) does not take input_shape and output_size "
        r"first \(define it as def build\(input_shape, output_size, \.\.\.\)"),
    "input_shape not first": (
        {"um_order.py": "def build(hidden, input_shape, output_size):\n    return None\n"},
        _user_spec("um_order:build", "{hidden: 8}"),
        r"um_order:build\(hidden, input_shape, output_size\) does not take input_shape and "
        r"output_size first"),
    "hyperparameter the factory does not take": (
        {"um_hp.py": _NET}, _user_spec("um_hp:build", "{hiden: 8}"),
        r"model\.um_hp:build\.hiden: um_hp:build\(input_shape, output_size, hidden=8\) takes "
        r"no hyperparameter 'hiden' \(did you mean 'hidden'\?\)"),
    "hyperparameter without default not set": (
        {"um_req.py": "def build(input_shape, output_size, depth, hidden=8):\n    pass\n"},
        _user_spec("um_req:build", "{hidden: 8}"),
        r"model\.um_req:build: um_req:build\(.*\) needs 'depth', which has no default \(set "
        r"model\.um_req:build\.depth or give it a default\)"),
    "factory returns no nn.Module": (
        {"um_dict.py": "def build(input_shape, output_size):\n    return {'layers': 2}\n"},
        _user_spec("um_dict:build"),
        r"model\.family: um_dict:build returned a dict, not a torch\.nn\.Module, for \{\}"),
    "wrong number of outputs": (
        {"um_out.py": _NET.replace("nn.Linear(hidden, output_size)", "nn.Linear(hidden, 5)")},
        _user_spec("um_out:build"),
        r"model\.family: um_out:build's model maps a batch of shape \(2, 1, 8, 8\) to \(2, 5\) "
        r"for \{\}; it must give \(2, 10\)"),
    "module raises on import": (
        {"um_raise.py": "raise RuntimeError('no GPU found')\n"}, _user_spec("um_raise:build"),
        r"model\.family: importing 'um_raise' for um_raise:build raised RuntimeError: no GPU "
        r"found \(python -c 'import um_raise' shows the traceback\)"),
    "dependency of the module missing": (
        {"um_dep.py": "import nosuch_dependency_i41\n" + _NET}, _user_spec("um_dep:build"),
        r"importing 'um_dep' for um_dep:build raised ModuleNotFoundError: No module named "
        r"'nosuch_dependency_i41'"),
    "section for a family not chosen": (
        {"um_extra.py": _NET}, "model:\n  family: mlp\n  'um_extra:build': {hidden: 8}\n",
        r"model\.um_extra:build: a section for a family that model\.family does not choose "
        r"\(mlp\); add 'um_extra:build' to model\.family"),
    "hyperparameter named input_shape": (
        {"um_shape.py": _NET}, _user_spec("um_shape:build", "{input_shape: 8}"),
        r"model\.um_shape:build\.input_shape: 'input_shape' is passed to every factory by "
        r"automl"),
    "section keyed by a dotted name": (
        {}, "model:\n  family: mlp\n  mlp.width: 8\n",
        r"model\.mlp\.width: 'mlp\.width' is not an import path"),
}


@pytest.fixture
def restore_imports():
    """Leave ``sys.path`` and ``sys.modules`` as they were: resolving a user's model puts
    the spec's folder in front of ``sys.path`` and imports its module in this process."""
    import sys

    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name.startswith(("um_", "nosuch")):
            del sys.modules[name]


@pytest.mark.parametrize("case", sorted(USER_MODELS), ids=str)
def test_bad_user_models(tmp_path, monkeypatch, restore_imports, case):
    """Issue 41: a user's model that cannot be used is one line and exit 2 before Ray or any
    run directory starts, whether `search` or `validate` reads it; the module is found from
    the spec's folder (the working directory is elsewhere)."""
    import re

    import ray

    files, text, pattern = USER_MODELS[case]
    spec_dir = tmp_path / "project"
    spec_dir.mkdir()
    _make(spec_dir, {k: v.encode() for k, v in files.items()})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    spec = spec_dir / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "runs"
    for args in (["search", str(spec), "--output", str(out)], ["validate", str(spec)]):
        result = CliRunner().invoke(app, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {spec}: "), lines[0]
        assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists() and not ray.is_initialized()


def test_user_model_corpus_is_big_enough():
    assert len(USER_MODELS) >= 8
