"""Where datasets live, the errors a missing one gives, and the registry of dataset loaders."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from dkilab.registry import Registry
from dkilab.types import Conversation

DATA_ENV = "DKILAB_DATA_DIR"
# loader(data_dir, limit=None, question_limit=None) -> conversations; one file each in this package
DATASETS: Registry[Callable[..., list[Conversation]]] = Registry("dataset", discover="dkilab.eval.data")


class DatasetNotFoundError(FileNotFoundError):
    pass


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The dataset directory: the argument, else $DKILAB_DATA_DIR."""
    chosen = path or os.environ.get(DATA_ENV)
    if not chosen:
        raise DatasetNotFoundError(
            f"no dataset directory: pass data_dir=... (or --data-dir) or set {DATA_ENV} to a directory "
            "holding locomo/, memdaily/, madial_bench/ (see datasets/*.md for where to get them)")
    return Path(chosen).expanduser()


def require(path: Path, what: str, how: str) -> Path:
    if not path.exists():
        raise DatasetNotFoundError(f"{what} not found at {path}. {how}")
    return path


def register_dataset(name: str, *, language: str, scorer: str = "auto", version: str = "1",
                     sources: tuple[str, ...] = (), description: str = "", preferences: bool = False,
                     choices: bool = False):
    """Decorator for a loader `fn(data_dir, limit=None, question_limit=None) -> list[Conversation]`.

    `language` (en, cn or mixed) and `scorer` (a registered scorer: locomo, f1, zh_f1, choice, auto)
    are what the runner asks the dataset for; `version` is part of every cell's identity (bump it when
    the loader changes what it produces); `sources` are glob patterns under the data dir (or absolute
    paths) whose files fingerprint the cache; `preferences`: whether its conversations carry a user
    profile (the preference block K/V strategies inject: without one, an alpha sweep changes nothing);
    `choices`: whether it has multiple-choice questions (asked with the harness's CHOOSE line, which then
    enters its cells' identity)."""
    def deco(fn):
        doc = sys.modules[fn.__module__].__doc__ or fn.__doc__ or ""
        DATASETS.add(name, fn, language=language, scorer=scorer, version=version, sources=tuple(sources),
                     preferences=preferences, choices=choices,
                     description=description or doc.strip().split("\n")[0])
        return fn

    return deco
