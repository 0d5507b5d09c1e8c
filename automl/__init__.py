"""automl: hyperparameter search and AutoML for PyTorch on Ray Tune + Optuna."""
