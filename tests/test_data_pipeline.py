"""The data pipeline on small real files: loaders, malformed files, cleaning, preprocessing
fitted on training rows only, and augmentation of training batches only."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from automl.data import (
    drop_duplicates,
    fit_preprocessor,
    fit_transform,
    load_dataset,
    load_preprocessor,
    make_augment,
    save_preprocessor,
    split_indices,
)
from automl.errors import DataError
from automl.spec import DataSpec

CSV = """age,city,income,label
34,paris,52000,yes
41,berlin,,no
29,,38000,yes
55,rome,61000,no
,paris,45000,yes
34,paris,52000,yes
38,berlin,47000,
47,rome,58000,no
"""


def _csv(tmp_path, text=CSV, name="people.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_with_categorical_missing_values_and_a_duplicate(tmp_path):
    data = load_dataset(DataSpec(source="csv", path=str(_csv(tmp_path)), target="label"))
    info = data.describe()
    assert data.kind == "tabular" and data.classes == ("no", "yes")
    assert info["cleaning"] == {"missing_target_rows": 1, "duplicate_rows": 1}
    assert info["rows"] == 6 and info["class_counts"] == {"no": 3, "yes": 3}
    assert info["features"] == {"numeric": ["age", "income"], "categorical": ["city"],
                                "missing_values": 3}
    X, y = fit_transform(data, np.arange(6))[0]
    # 2 scaled numeric columns + one-hot over berlin, paris, rome (the missing city is
    # imputed with the most frequent one, paris)
    assert X.shape == (6, 5) and X.dtype == np.float32 and not np.isnan(X).any()
    assert X[:, 2:].sum(axis=1).tolist() == [1.0] * 6
    assert X[:, 3].sum() == 3  # paris: rows 1, 3 (imputed) and 5
    assert y.tolist() == [1, 0, 1, 0, 1, 0]


def test_parquet_npz_and_relative_paths(tmp_path, monkeypatch):
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": ["x", "y", "x", "y"], "t": [0, 1, 0, 1]})
    frame.to_parquet(tmp_path / "t.parquet")
    monkeypatch.chdir(tmp_path)
    pq = load_dataset(DataSpec(source="parquet", path="t.parquet", target="t"))
    assert pq.classes == ("0", "1") and pq.categorical_columns == ["b"] and pq.n_rows == 4

    images = np.random.default_rng(0).integers(0, 256, (12, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "img.npz", X=images, y=np.arange(12) % 3, classes=np.array(["a", "b", "c"]))
    img = load_dataset(DataSpec(source="npz", path="img.npz"))
    assert img.kind == "image" and img.input_shape == (1, 8, 8) and img.classes == ("a", "b", "c")
    assert np.allclose(img.X[:, 0], images / 255.0)
    np.savez(tmp_path / "tab.npz", X=np.ones((5, 3)) * np.arange(5)[:, None],
             label=np.array(["u", "v", "u", "v", "u"]))
    tab = load_dataset(DataSpec(source="npz", path="tab.npz", target="label"))
    assert tab.kind == "tabular" and tab.input_shape == (3,)
    assert tab.describe()["class_counts"] == {"u": 3, "v": 2}


def _png(path, size=(6, 6), value=0, mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    color = value if mode == "L" else (value, 0, 0)
    Image.new(mode, size, color).save(path)


def test_image_folder_one_subfolder_per_class(tmp_path):
    for i in range(3):
        _png(tmp_path / "cat" / f"{i}.png", value=10 * i)
        _png(tmp_path / "dog" / f"{i}.png", value=200 + i)
    _png(tmp_path / "dog" / "3.png", value=201)  # a duplicate of dog/1.png
    data = load_dataset(DataSpec(source="image_folder", path=str(tmp_path)))
    assert data.classes == ("cat", "dog") and data.X.shape == (6, 1, 6, 6)
    assert data.describe()["cleaning"]["duplicate_rows"] == 1
    assert data.X[3, 0, 0, 0] == pytest.approx(200 / 255)
    _png(tmp_path / "dog" / "big.png", size=(9, 7), mode="RGB", value=99)
    with pytest.raises(DataError, match=r"big\.png: is 9x7 but the first image is 6x6.*image_size"):
        load_dataset(DataSpec(source="image_folder", path=str(tmp_path)))
    rgb = load_dataset(DataSpec(source="image_folder", path=str(tmp_path), image_size=4))
    assert rgb.X.shape == (7, 3, 4, 4)  # one RGB image makes the whole set RGB


@pytest.mark.parametrize(
    ("name", "content", "target", "message"),
    [
        ("empty.csv", b"", "label", r"empty\.csv: the file is empty"),
        ("latin1.csv", "a,label\n1,caf\xe9\n".encode("latin-1"), "label",
         r"latin1\.csv: not UTF-8 text \(byte 0xe9.*re-save the file as UTF-8"),
        ("people.csv", CSV.encode(), "lable", r"people\.csv: no target column 'lable'; did you "
                                              r"mean 'label'\?"),
        ("header.csv", b"a,label\n", "label", r"header\.csv: has a header but no rows"),
        ("one.csv", b"a,label\n1,x\n2,x\n", "label", r"one\.csv: target 'label' has one class"),
        ("bad.parquet", b"not parquet at all", "label", r"bad\.parquet: not a readable Parquet"),
    ],
)
def test_malformed_tables_name_the_file_and_the_problem(tmp_path, name, content, target, message):
    path = tmp_path / name
    path.write_bytes(content)
    source = "parquet" if name.endswith(".parquet") else "csv"
    with pytest.raises(DataError, match=message):
        load_dataset(DataSpec(source=source, path=str(path), target=target))


def test_malformed_npz_images_and_missing_files(tmp_path):
    np.savez(tmp_path / "noy.npz", X=np.zeros((3, 2)))
    with pytest.raises(DataError, match=r"noy\.npz: has no array 'y' \(arrays: X\)"):
        load_dataset(DataSpec(source="npz", path=str(tmp_path / "noy.npz")))
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(DataError, match=r"junk\.npz: not a readable \.npz archive"):
        load_dataset(DataSpec(source="npz", path=str(tmp_path / "junk.npz")))
    _png(tmp_path / "imgs" / "a" / "ok.png")
    _png(tmp_path / "imgs" / "b" / "ok.png", value=50)
    (tmp_path / "imgs" / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(DataError, match=r"b/broken\.png: cannot read image.*remove or replace"):
        load_dataset(DataSpec(source="image_folder", path=str(tmp_path / "imgs")))
    with pytest.raises(DataError, match=r"nowhere\.csv: no such file or folder"):
        load_dataset(DataSpec(source="csv", path=str(tmp_path / "nowhere.csv"), target="y"))


def test_duplicates_never_cross_the_train_test_boundary():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 3, (40, 4)).astype(float)
    X = np.concatenate([base, base[:25], base[:10]])  # 35 exact copies
    y = np.concatenate([np.arange(40) % 2, np.arange(25) % 2, np.arange(10) % 2])
    from automl.data import Dataset

    raw = Dataset("dups", X, y, ("a", "b"), "tabular")
    data = drop_duplicates(raw)
    assert data.cleaning["duplicate_rows"] == 75 - len(np.unique(np.c_[X, y], axis=0))
    s = split_indices(data.y, 0.3, 0.2, seed=0)
    rows = [tuple(r) for r in np.c_[data.frame.to_numpy(), data.y]]  # features + label
    assert not {rows[i] for i in s.test} & {rows[i] for i in np.r_[s.train, s.val]}
    leaky = split_indices(raw.y, 0.3, 0.2, seed=0)  # without dedupe copies do leak
    raw_rows = [tuple(r) for r in np.c_[X, y]]
    assert {raw_rows[i] for i in leaky.test} & {raw_rows[i] for i in leaky.train}


def test_preprocessing_statistics_come_from_training_indices_only(tmp_path):
    data = load_dataset(DataSpec(source="breast_cancer"))
    s = split_indices(data.y, 0.2, 0.2, seed=0)
    pre = fit_preprocessor(data, s.train)
    scaler = pre.named_transformers_["num"].named_steps["scale"]
    train_mean = data.frame.iloc[s.train].to_numpy().mean(axis=0)
    all_mean = data.frame.to_numpy().mean(axis=0)
    assert np.allclose(scaler.mean_, train_mean)
    assert not np.allclose(scaler.mean_, all_mean)
    (X_tr, _), (X_te, _) = fit_transform(data, s.train, s.test)
    assert np.allclose(X_tr.mean(axis=0), 0, atol=1e-5)
    assert not np.allclose(X_te.mean(axis=0), 0, atol=1e-2)

    # imputation and one-hot categories are learnt from the fitted rows only
    frame = pd.DataFrame({"v": [1.0, np.nan, 3.0, 100.0], "c": ["a", "a", "b", "zzz"],
                          "t": [0, 1, 0, 1]})
    frame.to_csv(tmp_path / "f.csv", index=False)
    tab = load_dataset(DataSpec(source="csv", path=str(tmp_path / "f.csv"), target="t"))
    pre = fit_preprocessor(tab, np.array([0, 1, 2]))
    assert pre.named_transformers_["num"].named_steps["impute"].statistics_.tolist() == [2.0]
    onehot = pre.named_transformers_["cat"].named_steps["onehot"]
    assert onehot.categories_[0].tolist() == ["a", "b"]
    (_, _), (X_unseen, _) = fit_transform(tab, np.array([0, 1, 2]), np.array([3]))
    assert X_unseen[0, 1:].tolist() == [0.0, 0.0]  # category 'zzz' unseen in training: zeros


class _Spy(torch.nn.Module):
    """Records every batch the augmentation receives and flips it horizontally."""

    def __init__(self):
        super().__init__()
        self.rows = 0

    def forward(self, x):
        self.rows += len(x)
        return x.flip(-1)


def test_augmentation_changes_training_batches_and_never_evaluation(monkeypatch):
    import automl.data
    from automl.space import TrialConfig
    from automl.train import TrainState, evaluate, fit

    x = torch.rand(16, 1, 8, 8)
    aug = make_augment({"rotation": 30.0, "hflip": 0.0, "crop_scale": 0.6}, (1, 8, 8))
    torch.manual_seed(0)
    assert aug(x).shape == x.shape and not torch.allclose(aug(x), x)
    flip = make_augment({"hflip": 1.0}, (1, 8, 8))
    assert torch.equal(flip(x), x.flip(-1))
    assert make_augment({"rotation": 0.0, "crop_scale": 1.0}, (1, 8, 8)) is None

    spy = _Spy()
    monkeypatch.setattr(automl.data, "make_augment", lambda params, shape: spy)
    cfg = TrialConfig(arch={"family": "resnet", "depth": 1, "width": 8, "stages": 2},
                      optimizer="adam", lr=1e-2, batch_size=8, epochs=2, weight_decay=0.0,
                      init="default", augment={"hflip": 1.0})
    train = (torch.rand(24, 1, 8, 8), torch.arange(24) % 3)
    val = (torch.rand(10, 1, 8, 8), torch.arange(10) % 3)
    state = TrainState.create(cfg, (1, 8, 8), 3, 24)
    fit(state, train, val)
    assert spy.rows == 2 * 24  # every training row, each epoch; no validation row
    before = evaluate(state.model, *val)
    assert evaluate(state.model, *val) == before and spy.rows == 48


def test_augmentation_is_searchable_and_rejected_for_tabular(tmp_path):
    import optuna
    from conftest import write_spec

    from automl.errors import SpecError
    from automl.space import TrialConfig, define_by_run
    from automl.spec import load_spec

    exp = load_spec(write_spec(tmp_path, """
data:
  augment:
    rotation: {type: float, low: 0, high: 20}
    hflip: {type: categorical, choices: [0.0, 0.5]}
"""))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    fixed = define_by_run(exp)(trial)
    flat = {**trial.params, **fixed}
    assert {"data.augment.rotation", "data.augment.hflip"} <= set(trial.params)
    cfg = TrialConfig.from_flat(flat, exp)
    assert 0 <= cfg.augment["rotation"] <= 20 and cfg.augment["crop_scale"] == 1.0
    plain = load_spec(write_spec(tmp_path, "name: plain\n", "plain.yaml"))
    fixed = define_by_run(plain)(trial)  # nothing searched here: every value is fixed
    assert not any(k.startswith("data.") for k in fixed)
    assert TrialConfig.from_flat(fixed, plain).augment == {}
    with pytest.raises(SpecError, match=r"data\.augment\.hflip: image augmentation needs image data"):
        load_spec(write_spec(tmp_path, "data: {source: wine, augment: {hflip: 0.5}}\n"
                             "model: {family: mlp}\n", "bad.yaml"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{source: csv}", r"data\.path: source 'csv' reads a file; set data\.path"),
        ("{source: parquet, path: t.parquet}", r"data\.target: a parquet file needs the name"),
        ("{source: iris, path: x.csv}", r"data\.path: source 'iris' is bundled"),
        ("{source: image_folder, path: imgs, target: y}", r"data\.target: source 'image_folder'"),
        ("{source: csv, path: a.csv, target: y, image_size: 8}", r"data\.image_size: only"),
        ("{augment: {crop_scale: 0}}", r"data\.augment\.crop_scale: must satisfy 0 < crop_scale"),
        ("{impute: {numeric: mode}}", r"data\.impute\.numeric: must be one of 'mean', "
                                      r"'median' or 'most_frequent', got 'mode'"),
        ("{source: xlsx}", r"unknown data source 'xlsx'"),
    ],
)
def test_data_spec_errors_name_the_key(tmp_path, data, message):
    from conftest import write_spec

    from automl.errors import SpecError
    from automl.spec import load_spec

    with pytest.raises(SpecError, match=message):
        load_spec(write_spec(tmp_path, f"data: {data}\nmodel: {{family: mlp}}\n"))


class _NotSklearn:  # a type the preprocessor loader must refuse
    pass


def test_preprocessor_round_trips_through_skops_and_refuses_other_types(tmp_path):
    data = load_dataset(DataSpec(source="csv", path=str(_csv(tmp_path)), target="label"))
    idx = np.arange(len(data.y))
    pre = fit_preprocessor(data, idx[:-2])
    path = save_preprocessor(pre, tmp_path / "preprocessor.skops")
    back = load_preprocessor(path)
    frame = data.frame.iloc[idx]
    assert np.array_equal(back.transform(frame), pre.transform(frame))
    assert back.transform(frame).shape[1] == pre.transform(frame).shape[1] > frame.shape[1] - 1

    import skops.io as sio

    sio.dump({"pre": pre, "extra": _NotSklearn()}, tmp_path / "evil.skops")
    with pytest.raises(DataError, match=r"evil\.skops: holds type .*_NotSklearn.*refusing"):
        load_preprocessor(tmp_path / "evil.skops")
    (tmp_path / "junk.skops").write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"junk\.skops: not a skops file"):
        load_preprocessor(tmp_path / "junk.skops")
    with pytest.raises(DataError, match=r"missing\.skops: no such file"):
        load_preprocessor(tmp_path / "missing.skops")
