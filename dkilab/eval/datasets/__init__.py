"""Dataset loaders into the normalised `Conversation` / `QAItem` form."""
from dkilab.eval.datasets.base import DATA_ENV, DatasetNotFoundError, data_dir
from dkilab.eval.datasets.locomo import load_locomo

__all__ = ["DATA_ENV", "DatasetNotFoundError", "data_dir", "load_locomo"]
