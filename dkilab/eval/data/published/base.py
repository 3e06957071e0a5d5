"""What a predictions reader gives: a published run's predictions, each with the id or question it answers,
the reply, and the verdicts of the judge that scored it where the file has them."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dkilab.registry import Registry


@dataclass(frozen=True)
class Prediction:
    where: str  # where in the file, for errors: "entry 12 (locomo_0_qa3)", "line 5"
    prediction: str
    qid: str | None = None  # the id as the file gives it: dkilab's, or `<dataset>_<conversation>_qa<question>`
    question: str | None = None
    verdicts: tuple[bool, ...] = ()  # the file's judge, one verdict per judging run
    category: str | None = None


@dataclass
class PublishedRun:
    path: Path
    format: str
    predictions: list[Prediction]
    answer_model: str | None = None
    judge_model: str | None = None
    metadata: dict = field(default_factory=dict)


class PredictionsError(ValueError):
    """A predictions file that cannot be read or matched: the message names the file and the entry."""


Reader = Callable[[Path], PublishedRun]
READERS: Registry[Reader] = Registry("predictions format", discover="dkilab.eval.data.published")


def register_reader(name: str, *, suffixes: tuple[str, ...], sniff: Callable[[Path], bool] | None = None,
                    description: str = ""):
    """Decorator for a reader `fn(path) -> PublishedRun`: `suffixes` and `sniff` (a look at the file) pick it
    under `format: auto`."""
    def deco(fn: Reader) -> Reader:
        doc = sys.modules[fn.__module__].__doc__ or fn.__doc__ or ""
        READERS.add(name, fn, suffixes=suffixes, sniff=sniff, description=description or doc.strip().split("\n")[0])
        return fn

    return deco


def pick_format(path: Path, fmt: str = "auto") -> str:
    if fmt != "auto":
        READERS[fmt]  # an unknown name: UnknownNameError listing the known ones
        return fmt
    for name in READERS.names():
        meta = READERS.meta(name)
        if path.name.lower().endswith(meta["suffixes"]) and (meta["sniff"] is None or meta["sniff"](path)):
            return name
    raise PredictionsError(f"{path}: no predictions reader takes this file (known formats: "
                           f"{', '.join(READERS.names())}); name one with format:")


def read_run(path: Path, fmt: str = "auto") -> PublishedRun:
    """The file's predictions, by its reader (`fmt`, or the one `auto` picks)."""
    name = pick_format(path, fmt)
    return READERS[name](path)
