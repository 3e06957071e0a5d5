"""MemDaily (from MemSim, Zhang et al., 2024): Chinese daily-life memory QA, one user per trajectory.

Layout: `memdaily/*.json` (24 files, 100-ish trajectories each); a trajectory has `message_list`
(user statements with time and place) and `question_list` (question, answer, choices A-D,
`ground_truth` letter, `target_step_id` = evidence message ids). Items the authors mark
`[ERRORQ]` / `[ERRORA]` are dropped (2,954 questions remain). Message ids are
`md:{file}:{tid}:{mid}`; the QA `answer` is the correct letter and the answer text is kept in
`metadata["answer_text"]`. With `limit`, trajectories are taken round-robin over the files so
every question type is present.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from itertools import zip_longest

from dkilab.eval.data.base import DatasetNotFoundError, data_dir, register_dataset, require
from dkilab.types import Conversation, Message, QAItem

DIR = "memdaily"
HOW = ("Copy data_generation/final_dataset/messages_and_QAs/*.json from github.com/nuster1128/MemSim "
       "into <data_dir>/memdaily/ (see datasets/memdaily.md).")
CST = timezone(timedelta(hours=8))
_DATE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日(?:\s*周.)?\s*(\d{1,2}):(\d{2})")


def parse_memdaily_time(text: str) -> datetime:
    m = _DATE.search(text or "")
    if not m:
        raise ValueError(f"unrecognised MemDaily time {text!r}")
    y, mo, d, h, mi = map(int, m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=CST)


def _bad(q: dict) -> bool:
    return any("[ERRORQ]" in str(v) or "[ERRORA]" in str(v) for v in (q.get("question"), q.get("answer")))


@register_dataset("memdaily", language="cn", scorer="choice", version="1", sources=(f"{DIR}/*.json",), choices=True)
def load_memdaily(data: str | None = None, limit: int | None = None, question_limit: int
                  | None = None) -> list[Conversation]:
    root = require(data_dir(data) / DIR, "MemDaily", HOW)
    files = sorted(root.glob("*.json"))
    if not files:
        raise DatasetNotFoundError(f"no MemDaily files (*.json) in {root}. {HOW}")
    per_file = []
    for f in files:
        try:
            per_file.append([(f.stem, t) for t in json.loads(f.read_text(encoding="utf-8"))])
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not valid JSON ({e})") from e
    order = [x for group in zip_longest(*per_file) for x in group if x is not None]
    out = []
    for stem, traj in order[:limit]:
        tid = traj["tid"]
        uid = f"md:{stem}:{tid}"
        msgs = [Message(f"{uid}:{m['mid']}", uid, uid, i, "user", m["message"], parse_memdaily_time(m["time"]),
                        metadata={"place": m.get("place")} if m.get("place") else {})
                for i, m in enumerate(traj["message_list"])]
        ids = {m.message_id for m in msgs}
        qs = []
        for q in traj["question_list"]:
            if _bad(q):
                continue
            evidence = [f"{uid}:{s}" for s in q.get("target_step_id", []) if f"{uid}:{s}" in ids]
            qs.append(QAItem(q["question"], q["ground_truth"], stem.split("_", 1)[1], evidence, True,
                             parse_memdaily_time(q["time"]), q.get("choices"), qid=f"{uid}:q{q['qid']}",
                             metadata={"answer_text": q["answer"]}, session_id=uid))
        out.append(Conversation(uid, uid, msgs, qs[:question_limit], language="cn"))
    return out
