"""Plain predictions, one per JSON line (`.jsonl`) or CSV row (`.csv`): `question_id` (or `qid` / `id`: dkilab's
id, or `<dataset>_<conversation>_qa<question>`) and/or `question`, the reply as `prediction` (or `answer` /
`generated_answer`), and optionally the file's judge as `verdict` (true/false, 1/0, CORRECT/WRONG) or
`verdicts` (a list, or `;`-separated in CSV), `category`, and the models as `model` / `judge_model`."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from dkilab.eval.data.published.base import Prediction, PredictionsError, PublishedRun, register_reader

IDS = ("question_id", "qid", "id")
REPLIES = ("prediction", "answer", "generated_answer")
_TRUE = {"true", "1", "correct", "yes"}
_FALSE = {"false", "0", "wrong", "no", "incorrect"}


def _verdict(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise PredictionsError(f"{where}: verdict {value!r} is not true/false, 1/0 or CORRECT/WRONG")


def _record(rec: dict, where: str) -> tuple[Prediction, dict]:
    qid = next((rec[k] for k in IDS if rec.get(k) not in (None, "")), None)
    question = rec.get("question") or None
    reply = next((rec[k] for k in REPLIES if k in rec and rec[k] is not None), None)
    if reply is None or not isinstance(reply, str):
        raise PredictionsError(f"{where}: needs the reply as a string under one of {', '.join(REPLIES)}")
    if qid is None and question is None:
        raise PredictionsError(f"{where}: needs a question id ({', '.join(IDS)}) or the question text")
    raw = rec.get("verdicts")
    if raw in (None, "") and rec.get("verdict") not in (None, ""):
        raw = [rec["verdict"]]
    if isinstance(raw, str):
        raw = [x for x in raw.split(";") if x.strip()]
    if raw not in (None, "") and not isinstance(raw, list):
        raise PredictionsError(f"{where}: verdicts must be a list")
    verdicts = tuple(_verdict(v, where) for v in raw or [])
    cat = rec.get("category")
    return (Prediction(where + (f" ({qid})" if qid is not None else ""), reply, None if qid is None else str(qid),
                       question, verdicts, None if cat in (None, "") else str(cat)),
            {k: rec.get(k) for k in ("model", "judge_model") if rec.get(k)})


def _run(path: Path, fmt: str, records: list[tuple[dict, str]]) -> PublishedRun:
    preds: list[Prediction] = []
    models: dict[str, set[str]] = {}
    for rec, where in records:
        if not isinstance(rec, dict):
            raise PredictionsError(f"{path}: {where}: expected an object")
        p, m = _record(rec, f"{path}: {where}")
        preds.append(p)
        for k, v in m.items():
            models.setdefault(k, set()).add(str(v))
    if not preds:
        raise PredictionsError(f"{path}: no predictions")
    for k, names in models.items():
        if len(names) > 1:
            raise PredictionsError(f"{path}: several values of {k} ({', '.join(sorted(names))}): one run per file")
    one = {k: next(iter(v)) for k, v in models.items()}
    return PublishedRun(path, fmt, preds, one.get("model"), one.get("judge_model"))


@register_reader("jsonl", suffixes=(".jsonl",))
def read_jsonl(path: Path) -> PublishedRun:
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PredictionsError(f"{path}: cannot read it ({exc})") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append((json.loads(line), f"line {n}"))
            except ValueError as exc:
                raise PredictionsError(f"{path}: line {n}: not valid JSON ({exc})") from None
    return _run(path, "jsonl", records)


@register_reader("csv", suffixes=(".csv",))
def read_csv(path: Path) -> PublishedRun:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PredictionsError(f"{path}: cannot read it as CSV ({exc})") from None
    return _run(path, "csv", [(r, f"row {n}") for n, r in enumerate(rows, 2)])
