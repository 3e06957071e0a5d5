"""MADial-Bench (He et al., 2024): memory-augmented emotional-support dialogue, Chinese and English.

Layout: `madial_bench/{zh,en}/MADial-Bench-{lang}-{dialogue,memory}.json` (JSON lines). The memory
archive holds dated events of two users (Bart, Lisa); each of the 160 dialogues has `test-turn`
(index of the assistant turn to generate, counting the `<BOD>` line as 0) and `relevant-id` (the gold
memory ids the turn should draw on). Not a QA set: the task is memory recall, then the response.

Normalised form (version 2): one Conversation per dialogue, as the benchmark defines a test case: the
dialogue's user's memory archive (each event in its own session `...:mem{id}`, dated by its `time`) and,
as one session, the dialogue's turns *before* its first test turn. One QAItem: the question is the user's
utterance right before the test turn, the answer is the gold assistant turn (never stored), the evidence is
the relevant memory ids (`madial:{lang}:mem{id}`) and `session_id` is the dialogue's session, so recall
sees the conversation so far. The conversation's user id is `madial-{lang}-u{user}-d{dialogue}`: each
dialogue is its own store user, so nothing of another dialogue is searchable. `limit` takes the first N
dialogues. English memory events carry no user id; they belong to the user the event names.

Version 1 kept one Conversation per user holding all of that user's dialogues, so recall for one dialogue
ranked the turns of the user's other dialogues (about 80 of them, dated on later days too, i.e. after the
question) beside the memory archive: about nine in ten of the recalled top 10 were such turns, none of
which the benchmark counts as memory.
"""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dkilab.config import read_jsonl
from dkilab.eval.data.base import data_dir, register_dataset, require
from dkilab.types import Conversation, Message, QAItem

DIR = "madial_bench"
HOW = ("Copy data/ch (as zh) and data/en from github.com/hejunqing/MADial-Bench into "
       "<data_dir>/madial_bench/ (see datasets/madial_bench.md).")
_TURN = re.compile(r"^<([^>]+)>\s*[:：]\s*(.*)$", re.S)
_QUOTES = "\"'“”‘’「」"
DIALOGUE_EPOCH = datetime(2024, 1, 1, 9, 0, tzinfo=timezone.utc)  # dialogues come after every memory event


def _lines(path: Path) -> list[dict]:
    return read_jsonl(path)


def _turn(line: str, position: int, user: str) -> tuple[str, str]:
    """(speaker, text) of dialogue line `position` (1 = first turn). Turns alternate user / assistant;
    some English lines lack the `<Name>:` tag, and then the position names the speaker."""
    m = _TURN.match(line.strip())
    if m:
        return m.group(1).strip(), m.group(2).strip().strip(_QUOTES).strip()
    return (user if position % 2 else "Assistant"), line.strip().lstrip("<").strip().strip(_QUOTES).strip()


def load_madial(lang: str, data: str | None = None, limit: int | None = None,
                question_limit: int | None = None) -> list[Conversation]:
    if lang not in ("zh", "en"):
        raise ValueError(f"MADial-Bench language must be 'zh' or 'en', got {lang!r}")
    root = require(data_dir(data) / DIR / lang, f"MADial-Bench ({lang})", HOW)
    dia_path = require(root / f"MADial-Bench-{lang}-dialogue.json", f"MADial-Bench ({lang}) dialogues", HOW)
    mem_path = require(root / f"MADial-Bench-{lang}-memory.json", f"MADial-Bench ({lang}) memory", HOW)
    dialogues = _lines(dia_path)[:limit]
    names: dict[int, str] = {}
    for i, d in enumerate(dialogues):
        m = _TURN.match(d["dialogue"][1].strip())
        if m is None:
            raise ValueError(
                f"{dia_path}, dialogue {i}: the first turn {d['dialogue'][1][:60]!r} does not name the user")
        names.setdefault(d["user-id"], m.group(1).strip())
    memory: dict[int, list[Message]] = {uid: [] for uid in names}
    for row in _lines(mem_path):
        (mid, ev), = row.items()
        uid = ev.get("user-id")
        if uid is None:  # the English archive: the user the event names
            named = [u for u, name in names.items() if re.search(rf"\b{re.escape(name)}\b", ev["event"])]
            uid = named[0] if len(named) == 1 else None
        if uid not in memory:
            continue
        memory[uid].append(Message(
            f"madial:{lang}:mem{mid}", f"madial-{lang}-u{uid}", f"madial:{lang}:mem{mid}", 0, "user", ev["event"],
            datetime.fromisoformat(ev["time"]).replace(hour=12, tzinfo=timezone.utc), topic=ev.get("scene"),
            speaker=names[uid], metadata={"kind": "memory", "emotion": ev.get("emotion"), "scene": ev.get("scene")}))
    for events in memory.values():
        events.sort(key=lambda m: m.timestamp)  # each dialogue's store gets a copy under its own user id
    out = []
    for i, d in enumerate(dialogues):  # one conversation per dialogue: its user's archive and its own turns
        uid, lines = d["user-id"], d["dialogue"]
        t = min(d["test-turn"])
        if not 2 <= t < len(lines) or t % 2:
            raise ValueError(f"{dia_path}, dialogue {i}: test-turn {t} is not an assistant turn of the dialogue "
                             f"({len(lines)} lines)")
        user, session = f"madial-{lang}-u{uid}-d{i}", f"madial:{lang}:d{i}"
        start = DIALOGUE_EPOCH + timedelta(days=i)
        turns = [_turn(x, n, names[uid]) for n, x in enumerate(lines[1:t + 1], 1)]  # <BOD> is line 0
        msgs = [replace(m, user_id=user, metadata=dict(m.metadata)) for m in memory[uid]]  # no dict shared by two users
        msgs += [Message(f"{session}:{n + 1}", user, session, n + 1, "assistant" if who == "Assistant" else "user",
                         text, start + timedelta(minutes=n), speaker=who, metadata={"kind": "dialogue"})
                 for n, (who, text) in enumerate(turns[:-2])]
        (_, question), (_, gold) = turns[-2], turns[-1]
        evidence = [f"madial:{lang}:mem{r}" for r in d["relevant-id"]]
        missing = [e for e in evidence if e not in {m.message_id for m in memory[uid]}]
        if missing:
            raise ValueError(
                f"{dia_path}: {session}:t{t} names memory ids {missing} that {mem_path} lacks for {names[uid]}")
        q = QAItem(question, gold, "memory_recall", evidence, True, start + timedelta(minutes=len(turns)),
                   qid=f"{session}:t{t}", metadata={"dialogue": i}, session_id=session)
        out.append(Conversation(user, user, msgs, [q][:question_limit], language="cn" if lang == "zh" else "en",
                                speakers={"user": names[uid], "assistant": "Assistant"},
                                metadata={"dataset": f"madial_bench_{lang}", "dialogue": i}))
    return out


@register_dataset("madial_bench_zh", language="cn", scorer="zh_f1", version="2", sources=(f"{DIR}/zh/*.json",))
def load_madial_zh(data=None, limit=None, question_limit=None):
    return load_madial("zh", data, limit, question_limit)


@register_dataset("madial_bench_en", language="en", scorer="f1", version="2", sources=(f"{DIR}/en/*.json",))
def load_madial_en(data=None, limit=None, question_limit=None):
    return load_madial("en", data, limit, question_limit)
