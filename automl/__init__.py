"""automl: hyperparameter search and AutoML for PyTorch on Ray Tune + Optuna.

``automl.search(spec, *, model=..., data=..., name=...)`` runs the main job from Python
(:func:`automl.api.search`); ``import automl`` stays cheap: the search and its imports
(Ray, Optuna, torch) load on first use.
"""


def __getattr__(name: str):
    if name == "search":  # the subpackage, callable as the Python API (automl.search)
        import importlib

        return importlib.import_module("automl.search")
    raise AttributeError(f"module 'automl' has no attribute {name!r}")
