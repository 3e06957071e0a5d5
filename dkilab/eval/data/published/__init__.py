"""Published predictions as cells (`dkilab import`, strategy `imported`): a predictions file read by a registered
reader (`base.register_reader`; one small module each: `audit.py` for the evaluation pipeline's
eval_results.json, `plain.py` for JSONL and CSV), each prediction matched to a question of the cell's dataset by
id (dkilab's, or `<dataset>_<conversation>_qa<question>` in loader order) or by its text, its question text
checked against the dataset's. A text that differs refuses the import, naming the id; predictions that match no
question, or a question outside the cell's selection, are counted and reported; a question of the cell without
a prediction is an error row (the cell then fails unless `max_error_rate` allows it), never dropped."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dkilab.eval.data import load_dataset
from dkilab.eval.data.published.base import (
    READERS,
    Prediction,
    PredictionsError,
    PublishedRun,
    pick_format,
    read_run,
    register_reader,
)
from dkilab.types import Answer

SOURCE_TAG = "dkilab.imported_from"  # on an imported cell's run: the file its answers came from
__all__ = ["SOURCE_TAG", "READERS", "Prediction", "PredictionsError", "PublishedRun", "Matched", "answers",
           "describe", "match", "pick_format", "read_run", "read_cached", "register_reader"]


def _norm(text: str | None) -> str:
    return " ".join(str(text or "").split())


@dataclass
class Matched:
    """The predictions of a file against a cell's questions."""
    by_index: dict[int, Prediction]  # cell question index -> its prediction
    predictions: int = 0
    outside: int = 0  # match a question of the dataset that the cell does not ask (another split, category, ...)
    unmatched: list[str] = field(default_factory=list)  # match no question of the dataset
    missing: list[int] = field(default_factory=list)  # cell question indexes without a prediction

    def counters(self) -> dict[str, float]:
        return {"imported_predictions": float(self.predictions), "imported_outside": float(self.outside),
                "imported_unmatched": float(len(self.unmatched)), "imported_missing": float(len(self.missing))}

    def summary(self, path) -> str:
        some = f" (e.g. {', '.join(self.unmatched[:3])})" if self.unmatched else ""
        return (f"{path}: {self.predictions} predictions, {len(self.by_index)} matched to the cell's questions, "
                f"{self.outside} to questions it does not ask, {len(self.unmatched)} to no question of the dataset"
                f"{some}; {len(self.missing)} of its questions have none")


def match(run: PublishedRun, dataset: str, conversations: list, items: list) -> Matched:
    """Each prediction of `run` matched to a question of `conversations` (the whole dataset, loader order), then
    to the cell's `items` [(conversation, question)]; PredictionsError on a question text that differs from the
    dataset's, an ambiguous text, or two predictions for one question."""
    by_id: dict[str, Any] = {}
    by_text: dict[str, list] = {}
    for c, conv in enumerate(conversations):
        for i, q in enumerate(conv.questions):
            by_id[str(q.qid)] = q
            by_id.setdefault(f"{dataset}_{c}_qa{i}", q)
            by_text.setdefault(_norm(q.question), []).append(q)
    position = {str(q.qid): k for k, (_, q) in enumerate(items)}
    out = Matched({}, predictions=len(run.predictions))
    seen: dict[str, str] = {}
    for p in run.predictions:
        if p.qid is not None:
            q = by_id.get(p.qid)
            if q is None:
                out.unmatched.append(p.qid)
                continue
            if p.question is not None and _norm(p.question) != _norm(q.question):
                raise PredictionsError(f"{run.path}: {p.where}: the question is {p.question!r} in the file but "
                                       f"{q.question!r} in {dataset} ({q.qid}): another version of the data, or "
                                       "another question: not imported")
        else:
            found = by_text.get(_norm(p.question), [])
            if not found:
                out.unmatched.append(_norm(p.question)[:60])
                continue
            if len(found) > 1:
                raise PredictionsError(f"{run.path}: {p.where}: the question {p.question!r} is asked {len(found)} "
                                       f"times in {dataset} ({', '.join(str(q.qid) for q in found[:4])}): give its "
                                       "question_id")
            q = found[0]
        qid = str(q.qid)
        if qid in seen:
            raise PredictionsError(f"{run.path}: {p.where} and {seen[qid]} both answer {qid}: one prediction per "
                                   "question")
        seen[qid] = p.where
        if qid in position:
            out.by_index[position[qid]] = p
        else:
            out.outside += 1
    out.missing = [k for k in range(len(items)) if k not in out.by_index]
    return out


@functools.lru_cache(maxsize=16)
def _read(path: str, fmt: str, sha1: str) -> PublishedRun:
    return read_run(Path(path), fmt)


def read_cached(strategy) -> PublishedRun:
    """The run an `imported` strategy names, read once per content digest."""
    return _read(str(strategy.file), strategy.params.format, strategy.sha1)


def describe(strategy) -> dict[str, Any]:
    """Where an imported cell's answers come from, for its card: file, digest, format and models."""
    run = read_cached(strategy)
    return {"source": str(strategy.file), "sha1": strategy.sha1, "format": run.format,
            "answer_model": strategy.params.answer_model or run.answer_model, "judge_model": run.judge_model}


def answers(cell, items: list, data_dir=None) -> tuple[list, list[str], Matched]:
    """An imported cell's [(i, Answer | error text, wall ms)] in question order, the error texts, the match."""
    strategy = cell.instance
    run = read_cached(strategy)
    d = cell.dataset
    found = match(run, d.key if d.path else d.name, load_dataset(d.name, data_dir=data_dir, path=d.path), items)
    out: list[tuple[int, Answer | str, float]] = []
    errors: list[str] = []
    for i, (_, item) in enumerate(items):
        p = found.by_index.get(i)
        if p is None:
            why = f"no prediction for {item.qid} in {strategy.file}"
            out.append((i, why, 0.0))
            errors.append(f"--- {item.qid}: {item.question}\n{why}")
            continue
        meta: dict[str, Any] = {"imported": True}
        if p.verdicts:
            meta["published_verdicts"] = list(p.verdicts)
        out.append((i, Answer(p.prediction, strategy="imported", rounds=0, kind="answer", metadata=meta), 0.0))
    return out, errors, found
