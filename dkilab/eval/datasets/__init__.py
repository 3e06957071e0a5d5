"""Dataset loaders into the normalised `Conversation` / `QAItem` form."""
from dkilab.eval.datasets.base import DATA_ENV, DatasetNotFoundError, data_dir
from dkilab.eval.datasets.fixtures import load_fixtures
from dkilab.eval.datasets.locomo import load_locomo
from dkilab.eval.datasets.madial import load_madial, load_madial_en, load_madial_zh
from dkilab.eval.datasets.memdaily import load_memdaily

__all__ = ["DATA_ENV", "DatasetNotFoundError", "data_dir", "load_locomo", "load_fixtures", "load_memdaily", "load_madial",
           "load_dataset", "LOADERS"]

LOADERS = {"locomo": load_locomo, "fixtures": load_fixtures, "memdaily": load_memdaily,
           "madial_bench_zh": load_madial_zh, "madial_bench_en": load_madial_en}


def load_dataset(name: str, data_dir=None, limit: int | None = None, question_limit: int | None = None):
    """Load a dataset by name (see `LOADERS`)."""
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(LOADERS))}")
    return LOADERS[name](data_dir, limit=limit, question_limit=question_limit)
