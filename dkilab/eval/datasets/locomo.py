"""LoCoMo (Maharana et al., 2024): 10 long English conversations between two people, 1,986 QA.

Rules of this loader: `speaker_a` plays the "user" role and `speaker_b` the "assistant" role (both
keep their names in `Message.speaker`); one conversation = one user; message ids are
`{sample_id}:{dia_id}` so QA evidence maps straight onto trace ids. Shared photos are kept as
"[shares a photo: caption]" since the caption is the only trace of the image in the dialogue. The
generated `observation` / `session_summary` / `event_summary` fields are ignored (they leak gold).
Category 5 (adversarial) questions are unanswerable; their trap answer is kept in metadata.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta, timezone

from dkilab.eval.datasets.base import data_dir, require
from dkilab.types import Conversation, Message, QAItem

log = logging.getLogger(__name__)
FILE = "locomo/locomo10.json"
HOW = ("Download locomo10.json from the LoCoMo repository (github.com/snap-research/locomo, data/) "
       "into <data_dir>/locomo/ (see datasets/locomo.md).")
CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
_DIA = re.compile(r"D(\d+):(\d+)")


def parse_locomo_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def load_locomo(data: str | None = None, limit: int | None = None, question_limit: int | None = None) -> list[Conversation]:
    path = require(data_dir(data) / FILE, "LoCoMo", HOW)
    raw = json.loads(path.read_text(encoding="utf-8"))
    convs, dropped = [], 0
    for sample in raw[:limit]:
        conv, n = _conversation(sample)
        conv.questions = conv.questions[:question_limit]
        convs.append(conv)
        dropped += n
    if dropped:
        log.info("LoCoMo: dropped %d malformed or dangling evidence ids", dropped)
    return convs


def _conversation(sample: dict) -> tuple[Conversation, int]:
    sid, c = sample["sample_id"], sample["conversation"]
    user_id = f"locomo-{sid}"
    roles = {c["speaker_a"]: "user", c["speaker_b"]: "assistant"}
    messages: list[Message] = []
    n_sessions = max(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k))
    last_date = None
    for n in range(1, n_sessions + 1):
        turns = c.get(f"session_{n}")
        if not turns:
            continue
        date_text = c[f"session_{n}_date_time"]
        start = last_date = parse_locomo_date(date_text)
        for i, t in enumerate(turns):
            text = t["text"]
            if t.get("blip_caption"):
                text = f"{text} [shares a photo: {t['blip_caption']}]"
            messages.append(Message(
                message_id=f"{sid}:{t['dia_id']}", user_id=user_id, session_id=f"{sid}:S{n}", turn_id=i + 1,
                role=roles.get(t["speaker"], "user"), content=text, timestamp=start + timedelta(seconds=30 * i),
                speaker=t["speaker"], metadata={"dia_id": t["dia_id"], "session_date": date_text}))
    known = {m.message_id for m in messages}
    questions, dropped = [], 0
    for qi, q in enumerate(sample["qa"]):
        evidence = []
        for entry in q.get("evidence", []):
            found = _DIA.findall(str(entry))
            if not found or not re.fullmatch(r"D\d+:\d+", str(entry).strip()):
                dropped += 1  # malformed (several ids in one string, or no id): keep what parses
            for s, t in found:
                mid = f"{sid}:D{s}:{t}"
                if mid in known:
                    evidence.append(mid)
                else:
                    dropped += 1
        cat = int(q["category"])
        answerable = cat != 5
        answer = str(q["answer"]) if answerable and "answer" in q else None
        questions.append(QAItem(
            question=q["question"], answer=answer, category=cat, evidence_ids=list(dict.fromkeys(evidence)),
            answerable=answerable, question_date=last_date, qid=f"{sid}:q{qi}",
            metadata={"category_name": CATEGORIES.get(cat, str(cat)),
                      **({"adversarial_answer": q.get("adversarial_answer")} if not answerable else {})}))
    conv = Conversation(conversation_id=sid, user_id=user_id, messages=messages, questions=questions, language="en",
                        speakers={"user": c["speaker_a"], "assistant": c["speaker_b"]}, metadata={"source": "locomo"})
    return conv, dropped
