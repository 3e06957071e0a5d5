"""LongMemEval (Wu et al., ICLR 2025): 500 questions, each over its own haystack of chat sessions between a user
and an assistant, in three releases: `longmemeval_s` (about 115k tokens of history per question),
`longmemeval_m` (about 500 sessions) and `longmemeval_oracle` (the evidence sessions only).

Rules of this loader (datasets/longmemeval.md):
- one question = one conversation, its user id `lme:<question_id>`: each question has its own haystack;
- message ids are `<question_id>:<session id>:<turn>`; the evidence is the turns marked `has_answer`, and the
  question's `answer_session_ids` are kept in metadata (the paper's session-level recall);
- `question_type` is the category; a question id ending in `_abs` is unanswerable, its `answer` (the
  explanation of why) kept in metadata;
- `haystack_dates` / `question_date` ("2023/05/20 (Sat) 02:21") time the sessions and the question; the turns of a
  session are 30 seconds apart.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from dkilab.eval.data.base import data_dir, register_dataset, require
from dkilab.types import Conversation, Message, QAItem

DIR = "longmemeval"
HOW = ("Download the release from the LongMemEval repository (github.com/xiaowu0162/LongMemEval, its Hugging Face "
       "dataset xiaowu0162/longmemeval-cleaned) into <data_dir>/longmemeval/ (see datasets/longmemeval.md).")
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
         "knowledge-update", "temporal-reasoning")
_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})\s*$")


class LongMemEvalError(ValueError):
    """A record that does not have the published format: the message names the file, the question and the key."""


def parse_date(text: str, where: str) -> datetime:
    """'2023/05/20 (Sat) 02:21' -> an aware UTC datetime."""
    m = _DATE.match(str(text))
    if not m:
        raise LongMemEvalError(f"{where}: date {text!r} is not in the form 2023/05/20 (Sat) 02:21")
    y, mo, d, h, mi = map(int, m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=timezone.utc)


def conversation(record: dict, source: str) -> Conversation:
    """One LongMemEval record as a conversation with its one question."""
    qid = str(record.get("question_id") or "")
    where = f"{source}: question {qid or '?'}"
    for key in ("question_id", "question_type", "question", "answer", "haystack_sessions", "haystack_dates"):
        if key not in record:
            raise LongMemEvalError(f"{where}: key {key!r} is missing")
    sessions, dates = record["haystack_sessions"], record["haystack_dates"]
    ids = record.get("haystack_session_ids") or [f"s{j}" for j in range(len(sessions))]
    if not (len(sessions) == len(dates) == len(ids)):
        raise LongMemEvalError(f"{where}: {len(sessions)} haystack_sessions, {len(dates)} haystack_dates and "
                               f"{len(ids)} haystack_session_ids")
    user = f"lme:{qid}"
    messages, evidence = [], []
    for j, (session, date, sid) in enumerate(zip(sessions, dates, ids)):
        start = parse_date(date, f"{where}: haystack_dates[{j}]")
        for i, turn in enumerate(session):
            if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
                raise LongMemEvalError(f"{where}: haystack_sessions[{j}][{i}] needs role and content")
            mid = f"{qid}:{sid}:{i}"
            messages.append(Message(message_id=mid, user_id=user, session_id=f"{qid}:{sid}", turn_id=i + 1,
                                    role="assistant" if turn["role"] == "assistant" else "user",
                                    content=str(turn["content"]), timestamp=start + timedelta(seconds=30 * i),
                                    metadata={"session_date": date}))
            if turn.get("has_answer"):
                evidence.append(mid)
    messages.sort(key=lambda m: (m.timestamp, m.session_id, m.turn_id))
    answerable = not qid.endswith("_abs")
    qdate = record.get("question_date")
    item = QAItem(question=str(record["question"]), answer=str(record["answer"]) if answerable else None,
                  category=str(record["question_type"]), evidence_ids=evidence, answerable=answerable,
                  question_date=parse_date(qdate, f"{where}: question_date") if qdate else None, qid=qid,
                  metadata={"answer_session_ids": [f"{qid}:{s}" for s in record.get("answer_session_ids", [])],
                            **({"explanation": str(record["answer"])} if not answerable else {})})
    return Conversation(conversation_id=qid, user_id=user, messages=messages, questions=[item], language="en",
                        metadata={"source": "longmemeval"})


def _load(release: str, data: str | None, limit: int | None, question_limit: int | None) -> list[Conversation]:
    root = data_dir(data) / DIR
    path = next((p for p in (root / f"{release}.json", root / f"{release}_cleaned.json") if p.exists()),
                root / f"{release}.json")
    require(path, f"LongMemEval ({release})", HOW)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise LongMemEvalError(f"{path}: not JSON ({e})") from None
    if not isinstance(records, list):
        raise LongMemEvalError(f"{path}: expected a list of question records")
    convs = [conversation(r, str(path)) for r in records[:limit] if isinstance(r, dict)]
    return convs  # one question each: question_limit (per conversation) leaves them as they are


@register_dataset("longmemeval_s", language="en", scorer="f1", version="1",
                  sources=(f"{DIR}/longmemeval_s*.json",))
def load_longmemeval_s(data: str | None = None, limit: int | None = None, question_limit: int | None = None):
    return _load("longmemeval_s", data, limit, question_limit)


@register_dataset("longmemeval_m", language="en", scorer="f1", version="1",
                  sources=(f"{DIR}/longmemeval_m*.json",))
def load_longmemeval_m(data: str | None = None, limit: int | None = None, question_limit: int | None = None):
    return _load("longmemeval_m", data, limit, question_limit)


@register_dataset("longmemeval_oracle", language="en", scorer="f1", version="1",
                  sources=(f"{DIR}/longmemeval_oracle*.json",))
def load_longmemeval_oracle(data: str | None = None, limit: int | None = None, question_limit: int | None = None):
    return _load("longmemeval_oracle", data, limit, question_limit)
