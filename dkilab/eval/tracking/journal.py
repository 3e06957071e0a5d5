"""Per-question resume: a cell's answers saved as they finish, so a rerun continues where it stopped.

One JSON line per answered question (`{"i", "qid", "digest", "config", "wall_ms", "answer"}`) in
`.dkilab-journal[/<sqlite file>]/<experiment>/<config hash>.<rank>.jsonl` beside a local tracking store (under
`$DKILAB_CACHE_DIR/journal/<store digest>/` for a server), flushed and fsynced per line, so a
kill -9 loses at most the question being written (a torn last line is skipped). Questions that raised are
not journaled: a rerun of a cell that failed redoes only its error rows. The runner deletes the journal
when the cell finishes; the config hash names it, so a changed config never reads another's answers, and
each record carries its question's content digest (`question_digest`), so a question whose text, gold,
evidence or choices changed under the same index and qid is asked again, never answered from the record.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from dkilab.cache import cache_dir
from dkilab.eval.tracking.runstate import store_state_dir
from dkilab.types import Answer, ContextBudget, FactCall


def question_digest(item) -> str:
    """A question's content as a digest: its text, gold, evidence ids, choices and what else decides its
    answer or score (category, answerability, date, session, task inputs)."""
    content = {"question": item.question, "answer": item.answer, "evidence_ids": list(item.evidence_ids),
               "choices": item.choices, "category": item.category, "answerable": item.answerable,
               "question_date": item.question_date, "session_id": item.session_id, "task": item.task}
    blob = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def answer_to_json(a: Answer) -> dict[str, Any]:
    return dataclasses.asdict(a)


REVIEW_KEYS = ("memory_view", "evidence_problems", "agent_stop", "pointer", "fact_protocol", "formatter",
               "session_turn")


def answer_from_json(d: dict[str, Any]) -> Answer:
    """An Answer back from its JSON (answers stored before `kind` and `review` carried their flags and review
    fields in `metadata`: they are moved over)."""
    d = dict(d)
    if "kind" not in d:
        meta = dict(d.get("metadata") or {})
        d["kind"] = ("context" if meta.pop("context_only", False) else "ranking" if meta.pop("retrieval_only", False)
                     else meta.pop("task") if meta.get("task") in ("memory_view", "pointer") else "answer")
        d["review"] = {k: meta.pop(k) for k in REVIEW_KEYS if k in meta}
        d["metadata"] = meta
    d["fact_calls"] = [FactCall(**f) for f in d.get("fact_calls") or []]
    d["budget"] = ContextBudget(**d["budget"]) if d.get("budget") else None
    return Answer(**d)


class Journal:
    def __init__(self, directory: Path, config_hash: str, rank: int = 0):
        self.directory, self.config_hash, self.rank = Path(directory), config_hash, rank
        self.path = self.directory / f"{config_hash}.{rank}.jsonl"

    @classmethod
    def for_cell(cls, uri: str, experiment: str, config_hash: str, rank: int = 0) -> "Journal":
        """The journal of a cell of `experiment` on the tracking store `uri`: beside a local store (so two
        stores never share answers), under the cache directory for a server."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", experiment)[:100] or "_"
        root = store_state_dir(uri, "journal") or cache_dir() / "journal" / hashlib.sha1(uri.encode()).hexdigest()[:12]
        return cls(root / safe, config_hash, rank)

    def files(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.config_hash}.*.jsonl")) if self.directory.exists() else []

    def load(self, items: list) -> dict[int, tuple[Answer, float]]:
        """index -> (Answer, wall ms) for every journaled question that is still the same question (qid and
        content digest)."""
        done: dict[int, tuple[Answer, float]] = {}
        digests: dict[int, str] = {}
        for f in self.files():
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    i = int(rec["i"])
                    if not (0 <= i < len(items) and str(items[i][1].qid) == rec["qid"]):
                        continue
                    if i not in digests:
                        digests[i] = question_digest(items[i][1])
                    if rec.get("digest") == digests[i] and rec.get("config") == self.config_hash:
                        done[i] = (answer_from_json(rec["answer"]), float(rec["wall_ms"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line (kill -9 mid-write) or a record of another shape
        return done

    def append(self, i: int, item, answer: Answer, wall_ms: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"i": i, "qid": str(item.qid), "digest": question_digest(item), "config": self.config_hash,
                           "wall_ms": wall_ms,
                           "answer": answer_to_json(answer)},
                          ensure_ascii=False, default=str)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def clear(self) -> None:
        for f in self.files():
            f.unlink(missing_ok=True)
