"""Per-question resume: a cell's answers saved as they finish, so a rerun continues where it stopped.

One JSON line per answered question (`{"i", "qid", "wall_ms", "answer"}`) in
`.dkilab-journal/<experiment>/<config hash>.<rank>.jsonl` beside a local tracking store (under
`$DKILAB_CACHE_DIR/journal/<store digest>/` for a server), flushed and fsynced per line, so a
kill -9 loses at most the question being written (a torn last line is skipped). Questions that raised are
not journaled: a rerun of a cell that failed redoes only its error rows. The runner deletes the journal
when the cell finishes; the config hash names it, so a changed config never reads another's answers.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from dkilab.types import Answer, ContextBudget, FactCall


def answer_to_json(a: Answer) -> dict[str, Any]:
    return dataclasses.asdict(a)


REVIEW_KEYS = ("memory_view", "evidence_problems", "agent_stop", "pointer", "fact_protocol", "formatter", "session_turn")


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
        import hashlib

        from dkilab.cache import cache_dir
        from dkilab.eval.runstate import local_store_dir

        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", experiment)[:100] or "_"
        local = local_store_dir(uri)
        root = (local / ".dkilab-journal" if local is not None
                else cache_dir() / "journal" / hashlib.sha1(uri.encode()).hexdigest()[:12])
        return cls(root / safe, config_hash, rank)

    def files(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.config_hash}.*.jsonl")) if self.directory.exists() else []

    def load(self, items: list) -> dict[int, tuple[Answer, float]]:
        """index -> (Answer, wall ms) for every journaled question that is still the same question."""
        done: dict[int, tuple[Answer, float]] = {}
        for f in self.files():
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    i = int(rec["i"])
                    if 0 <= i < len(items) and str(items[i][1].qid) == rec["qid"]:
                        done[i] = (answer_from_json(rec["answer"]), float(rec["wall_ms"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line (kill -9 mid-write) or a record of another shape
        return done

    def append(self, i: int, qid, answer: Answer, wall_ms: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"i": i, "qid": str(qid), "wall_ms": wall_ms, "answer": answer_to_json(answer)},
                          ensure_ascii=False, default=str)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def clear(self) -> None:
        for f in self.files():
            f.unlink(missing_ok=True)
