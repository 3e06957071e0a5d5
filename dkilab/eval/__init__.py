"""Evaluation: dataset loaders, metrics, runner and MLflow tracking."""
