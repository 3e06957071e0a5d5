"""LoCoMo (Maharana et al., 2024): 10 long English conversations between two people, 1,986 QA.

Rules of this loader: `speaker_a` plays the "user" role and `speaker_b` the "assistant" role (both
keep their names in `Message.speaker`); one conversation = one user; message ids are
`{sample_id}:{dia_id}` so QA evidence maps straight onto trace ids. Shared photos are kept as
"[shares a photo: caption]" since the caption is the only trace of the image in the dialogue. The
generated `observation` / `session_summary` / `event_summary` fields are ignored (they leak gold).
Category 5 (adversarial) questions are unanswerable; their trap answer is kept in metadata.

Tolerated variants seen in LoCoMo-style releases: session dates in other formats ("2023-05-08 13:56",
"May 8, 2023"), turn text under `clean_text` / `content` / `utterance`, image-only turns (no text: the
caption, else "[shares a photo]"), evidence as ranges (`D12:3-D12:5`, `D12:3-5`), several ids in one
string (`;`, `,` or space separated) and a stray colon (`D:11:26`).
"""
from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta, timezone

from dkilab.eval.data.base import data_dir, register_dataset, require
from dkilab.eval.data.normalized import parse_time
from dkilab.types import Conversation, Message, QAItem

log = logging.getLogger(__name__)
FILE = "locomo/locomo10.json"
HOW = ("Download locomo10.json from the LoCoMo repository (github.com/snap-research/locomo, data/) "
       "into <data_dir>/locomo/ (see datasets/locomo.md).")
CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)(?:\s*[-–]\s*(?:D:?(\d+):)?(\d+))?")
_TEXT_KEYS = ("text", "clean_text", "content", "utterance")


def parse_locomo_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' (or any other date format dateutil reads) -> aware UTC datetime."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return parse_time(text)


def parse_evidence(entry) -> list[tuple[int, int]]:
    """(session, turn) pairs of one evidence entry: 'D1:3', 'D1:3; D2:5', 'D12:3-D12:5', 'D12:3-5', 'D:11:26'."""
    out = []
    for m in _EVIDENCE.finditer(str(entry)):
        s, t, s2, t2 = m.groups()
        if t2 is None:
            out.append((int(s), int(t)))
        elif s2 is not None and s2 != s:  # a range across sessions: its two ends
            out += [(int(s), int(t)), (int(s2), int(t2))]
        else:
            out += [(int(s), k) for k in range(int(t), min(int(t2), int(t) + 200) + 1)]
    return out


def _turn_text(t: dict) -> str:
    text = next((str(t[k]) for k in _TEXT_KEYS if t.get(k)), "")
    caption = t.get("blip_caption")
    if caption:
        return f"{text} [shares a photo: {caption}]".strip()
    if not text and (t.get("img_url") or t.get("image")):
        return "[shares a photo]"
    return text


@register_dataset("locomo", language="en", scorer="locomo", version="2", sources=(FILE,))
def load_locomo(data: str | None = None, limit: int | None = None, question_limit: int
                | None = None) -> list[Conversation]:
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
            text = _turn_text(t)
            messages.append(Message(
                message_id=f"{sid}:{t['dia_id']}", user_id=user_id, session_id=f"{sid}:S{n}", turn_id=i + 1,
                role=roles.get(t["speaker"], "user"), content=text, timestamp=start + timedelta(seconds=30 * i),
                speaker=t["speaker"], metadata={"dia_id": t["dia_id"], "session_date": date_text}))
    known = {m.message_id for m in messages}
    questions, dropped = [], 0
    for qi, q in enumerate(sample["qa"]):
        evidence = []
        for entry in q.get("evidence", []):
            found = parse_evidence(entry)
            if not found:
                dropped += 1  # no id in it at all
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
