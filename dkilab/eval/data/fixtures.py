"""The bundled bilingual fixtures (`datasets/fixtures/memory_qa.json`, written by the dkilab authors).

Four users (two English, two Chinese), three sessions each, long messages that need summaries,
reference expressions, preferences that change over time, and 48 questions of which 12 are
unanswerable. Message ids are `{session_id}#{index}`, the form the file's evidence uses; each
question is asked in the user's last session (`QAItem.session_id`), an hour after it.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from dkilab.eval.data.base import register_dataset, require
from dkilab.types import Conversation, Message, QAItem

FIXTURES = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "memory_qa.json"


@register_dataset("fixtures", language="mixed", scorer="auto", version="1", sources=(str(FIXTURES),), preferences=True)
def load_fixtures(data=None, limit: int | None = None, question_limit: int | None = None,
                  path: str | Path | None = None) -> list[Conversation]:
    """`data` (the third-party data dir) is not used: the fixtures ship with the repository."""
    src = require(Path(path) if path else FIXTURES, "dkilab fixtures",
                  "They ship with the repository (datasets/fixtures/).")
    raw = json.loads(src.read_text(encoding="utf-8"))
    out = []
    for c in raw["conversations"][:limit]:
        uid, speakers, msgs = c["user_id"], c.get("speakers", {}), []
        for s in c["sessions"]:
            start = datetime.fromisoformat(s["start"])
            for i, (role, text) in enumerate(s["turns"]):
                if role not in ("user", "assistant"):
                    raise ValueError(
                        f"{src}: {uid} {s['session_id']}#{i}: role must be user or assistant, got {role!r}")
                msgs.append(Message(f"{s['session_id']}#{i}", uid, s["session_id"], i // 2, role, text,
                                    start + timedelta(minutes=2 * i), speaker=speakers.get(role)))
        ids = {m.message_id for m in msgs}
        last = c["sessions"][-1]["session_id"]
        asked = msgs[-1].timestamp + timedelta(hours=1)
        qs = []
        for n, q in enumerate(c["questions"]):
            missing = [e for e in q.get("evidence", []) if e not in ids]
            if missing:
                raise ValueError(f"{src}: {uid} question {n}: evidence {missing} names no turn")
            answerable = q.get("answer") is not None
            qs.append(QAItem(q["question"], q["answer"], q.get("category"), list(q.get("evidence", [])),
                             answerable, asked, q.get("choices"), qid=f"{uid}:q{n}",
                             session_id=last))
        out.append(Conversation(uid, uid, msgs, qs[:question_limit], language="cn" if c["language"] == "zh" else "en",
                                speakers=speakers, preferences=list(c.get("preferences", []))))
    return out
