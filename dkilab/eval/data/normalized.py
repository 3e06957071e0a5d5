"""The normalised dialogue format, as Hugging Face `datasets` with declared features, cached by fingerprint.

Every loader's conversations pass through `FEATURES` (one record per conversation) and are cached on
disk (`$DKILAB_CACHE_DIR/datasets/<name>-<fingerprint>`, fingerprint = loader version + the source
files' names, sizes and modification times + limits), so a second load reads Arrow files.

Any further dialogue dataset needs no code: write it in this format as JSON (a list, or
`{"conversations": [...]}`), JSONL (one conversation per line) or Parquet, and name it in an
experiment as `{name: mydata, path: mydata.jsonl}` (a path relative to the data dir, or absolute).
One conversation = one user's history and the questions about it:

    {"conversation_id": "c1", "user_id": "u1", "language": "en",          # language: en | cn | zh | auto
     "speakers": {"user": "Ana", "assistant": "Assistant"}, "preferences": ["Ana is vegetarian."],
     "messages": [{"message_id": "c1:1", "session_id": "s1", "turn_id": 0, "role": "user",
                   "speaker": "Ana", "content": "...", "timestamp": "2024-05-01T10:00:00Z"}, ...],
     "questions": [{"qid": "c1:q1", "question": "...", "answer": "..." | null, "category": "single_hop",
                    "evidence_ids": ["c1:1"], "answerable": true, "session_id": "s2",
                    "choices": {"A": "...", "B": "..."}, "question_date": "2024-06-01"}, ...]}

Only `messages[].content`, `messages[].timestamp` and `questions[].question` are required; ids,
sessions, turns, roles, users default sensibly; a question with `answer: null` is unanswerable.
Timestamps take ISO 8601, epoch seconds or any date `dateutil` reads.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from dateutil import parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dkilab.cache import cache_dir, file_digest
from dkilab.config import describe_errors, read_jsonl
from dkilab.text.lang import detect_language
from dkilab.types import Conversation, Message, QAItem, to_utc

FORMAT_VERSION = "1"


def parse_time(value: Any) -> Any:
    """ISO 8601, epoch seconds (a number or digits), or a date string dateutil understands ('1:56 pm on 8 May,
    2023')."""
    if value is None or not isinstance(value, str):
        return to_utc(value)
    if value.strip().replace(".", "", 1).isdigit():  # epoch seconds written as text (CSV, Parquet)
        return to_utc(float(value))
    try:
        return to_utc(value)
    except ValueError:
        try:
            return to_utc(parser.parse(value.replace(" on ", " ")))
        except (ValueError, OverflowError):
            raise ValueError(f"unrecognised date/time {value!r}") from None


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data):
        # Parquet and pandas write a missing list or key as null: treat it as absent (the default)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class MessageRecord(_Record):
    message_id: str | None = None
    session_id: str | None = None
    turn_id: int | None = None
    role: str = "user"
    speaker: str | None = None
    content: str
    timestamp: Any
    topic: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("timestamp")
    @classmethod
    def _ts(cls, v):
        return parse_time(v)


class QuestionRecord(_Record):
    qid: str | None = None
    question: str
    answer: str | None = None
    category: str | int | None = None
    evidence_ids: list[str] = Field(default_factory=list)
    answerable: bool | None = None
    session_id: str | None = None
    choices: dict[str, str] | None = None
    question_date: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("question_date")
    @classmethod
    def _date(cls, v):
        return parse_time(v) if v is not None else None

    @field_validator("answer", mode="before")
    @classmethod
    def _answer(cls, v):
        return None if v is None else str(v)


class ConversationRecord(_Record):
    conversation_id: str
    user_id: str | None = None
    language: str = "auto"
    speakers: dict[str, str] = Field(default_factory=dict)
    preferences: list[str] = Field(default_factory=list)
    messages: list[MessageRecord]
    questions: list[QuestionRecord] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


def features():
    """The declared Hugging Face features of one conversation record."""
    from datasets import Features, Value

    s, i, b = Value("string"), Value("int64"), Value("bool")
    message = {"message_id": s, "user_id": s, "session_id": s, "turn_id": i, "role": s, "speaker": s, "content": s,
               "timestamp": s, "topic": s, "metadata": s}
    question = {"qid": s, "question": s, "answer": s, "category": s, "evidence_ids": [s], "answerable": b,
                "question_date": s, "choices": [{"key": s, "text": s}], "metadata": s}
    return Features({"conversation_id": s, "user_id": s, "language": s, "speakers": [{"role": s, "name": s}],
                     "preferences": [s], "metadata": s, "messages": [message], "questions": [question]})


def _category_out(value: str | None):
    return int(value) if value is not None and value.lstrip("-").isdigit() else value


def to_records(conversations: list[Conversation]) -> list[dict[str, Any]]:
    def iso(ts):
        return ts.isoformat() if ts is not None else None

    out = []
    for c in conversations:
        out.append({
            "conversation_id": c.conversation_id, "user_id": c.user_id, "language": c.language,
            "speakers": [{"role": k, "name": v} for k, v in c.speakers.items()], "preferences": list(c.preferences),
            "metadata": json.dumps(c.metadata, ensure_ascii=False, default=str),
            "messages": [{"message_id": m.message_id, "user_id": m.user_id, "session_id": m.session_id,
                          "turn_id": m.turn_id, "role": m.role, "speaker": m.speaker, "content": m.content,
                          "timestamp": iso(m.timestamp), "topic": m.topic,
                          "metadata": json.dumps(m.metadata, ensure_ascii=False, default=str)} for m in c.messages],
            "questions": [{"qid": q.qid, "question": q.question, "answer": q.answer,
                           "category": None if q.category is None else str(q.category),
                           "evidence_ids": list(q.evidence_ids), "answerable": q.answerable,
                           "question_date": iso(q.question_date),
                           "choices": [{"key": k, "text": v} for k, v in (q.choices or {}).items()],
                           "metadata": json.dumps(q.metadata | {k: v for k, v in (("session_id", q.session_id),
                                                                                  ("task", q.task)) if v is not None},
                                                  ensure_ascii=False, default=str)} for q in c.questions]})
    return out


def from_records(records) -> list[Conversation]:
    out = []
    for r in records:
        msgs = [Message(m["message_id"], m["user_id"], m["session_id"], m["turn_id"], m["role"], m["content"],
                        to_utc(m["timestamp"]), topic=m["topic"], speaker=m["speaker"],
                        metadata=json.loads(m["metadata"]))
                for m in r["messages"]]
        qs = [QAItem(q["question"], q["answer"], _category_out(q["category"]), list(q["evidence_ids"]), q["answerable"],
                     to_utc(q["question_date"]) if q["question_date"] else None,
                     {c["key"]: c["text"] for c in q["choices"]} or None, qid=q["qid"],
                     metadata=json.loads(q["metadata"]))
              for q in r["questions"]]
        out.append(Conversation(r["conversation_id"], r["user_id"], msgs, qs, language=r["language"],
                                speakers={s["role"]: s["name"] for s in r["speakers"]},
                                preferences=list(r["preferences"]), metadata=json.loads(r["metadata"])))
    return out


def as_hf_dataset(conversations: list[Conversation]):
    """The conversations as a `datasets.Dataset` with the declared features."""
    from datasets import Dataset

    return Dataset.from_list(to_records(conversations), features=features())


def fingerprint(*parts: Any, files: Iterable[Path] = ()) -> str:
    """The Arrow cache's key: the parts, and each source file's path and bytes (`dkilab.cache.file_digest`), never
    its size and mtime alone (an edit that keeps both, as `cp -p` or `rsync -a` over it, would get the old golds)."""
    h = hashlib.sha1(json.dumps([FORMAT_VERSION, *parts], default=str, sort_keys=True).encode())
    for f in sorted(files):
        h.update(f"{f.resolve()}:{file_digest(f)}".encode())
    return h.hexdigest()[:16]


def cached(name: str, key: str, build) -> list[Conversation]:
    """Conversations from the Arrow cache `<cache>/datasets/<name>-<key>`, else `build()` and cache them."""
    from datasets import load_from_disk

    target = cache_dir() / "datasets" / f"{name}-{key}"
    if (target / "dataset_info.json").exists():
        try:
            return from_records(load_from_disk(str(target)))
        except Exception:  # a damaged cache is rebuilt, never trusted
            shutil.rmtree(target, ignore_errors=True)
    conversations = build()
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    import datasets

    quiet = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        as_hf_dataset(conversations).save_to_disk(str(tmp))
    finally:
        if quiet:
            datasets.enable_progress_bars()
    try:
        os.replace(tmp, target)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return conversations


# --- the normalised format on disk ---------------------------------------------------------------
def _read_records(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd

        return json.loads(pd.read_parquet(path).to_json(orient="records", force_ascii=False))
    if suffix == ".jsonl":
        return read_jsonl(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    data = data.get("conversations") if isinstance(data, dict) else data
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of conversations (or {{\"conversations\": [...]}})")
    return data


def read_normalized(path: Path) -> list[Conversation]:
    """Conversations from a file in the normalised format; errors name the file, record and field."""
    out = []
    for n, raw in enumerate(_read_records(path)):
        try:
            rec = ConversationRecord.model_validate(raw)
        except ValidationError as exc:
            cid = raw.get("conversation_id", "?") if isinstance(raw, dict) else "?"
            raise ValueError(f"{path}: conversation {n} ({cid}): {describe_errors(exc)}") from None
        uid = rec.user_id or rec.conversation_id
        msgs = [Message(m.message_id or f"{rec.conversation_id}:{i}", uid, m.session_id or rec.conversation_id,
                        m.turn_id if m.turn_id is not None else i, m.role, m.content, m.timestamp, topic=m.topic,
                        speaker=m.speaker or rec.speakers.get(m.role), metadata=m.metadata)
                for i, m in enumerate(rec.messages)]
        ids = {m.message_id for m in msgs}
        qs = []
        for j, q in enumerate(rec.questions):
            missing = [e for e in q.evidence_ids if e not in ids]
            if missing:
                raise ValueError(f"{path}: conversation {n} ({rec.conversation_id}) question {j}: evidence {missing} "
                                 "names no message")
            answerable = q.answerable if q.answerable is not None else q.answer is not None
            qs.append(QAItem(q.question, q.answer, q.category, q.evidence_ids, answerable, q.question_date, q.choices,
                             qid=q.qid or f"{rec.conversation_id}:q{j}",
                             metadata=dict(q.metadata), session_id=q.session_id))
        lang = rec.language if rec.language != "auto" else detect_language(" ".join(m.content for m in msgs[:20]))
        out.append(Conversation(rec.conversation_id, uid, msgs, qs, language="cn" if lang == "zh" else lang,
                                speakers=rec.speakers, preferences=rec.preferences, metadata=rec.metadata))
    return out
