"""A small ingest-and-search demo on the bundled fixture conversations (`dkilab demo`)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from dkilab.memory import MemoryStore
from dkilab.types import Message

FIXTURE = Path(__file__).resolve().parent.parent / "datasets" / "fixtures" / "demo.json"


def demo_messages(path: Path = FIXTURE) -> list[Message]:
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for conv in data["conversations"]:
        for sess in conv["sessions"]:
            start = datetime.fromisoformat(sess["start"])
            for i, (role, text) in enumerate(sess["turns"]):
                out.append(Message(f"{sess['session_id']}:{i}", conv["user_id"], sess["session_id"], i // 2 + 1,
                                   role, text, start + timedelta(minutes=i)))
    return out


def run_demo(store_path: str | None = None) -> None:
    with MemoryStore.open(store_path) as store:
        added = store.add_messages(demo_messages())
        print(f"ingested {added} new messages into {store.path} ({store.count()} in all)")
        lin, maya = store.for_user("u_lin"), store.for_user("u_maya")
        for title, page in [
            ('lin  lexical_search("\\"不吃辣\\"")', lin.lexical_search('"不吃辣"')),
            ('lin  semantic_search("餐厅几点关门")', lin.semantic_search("餐厅几点关门", top_k=2)),
            ('maya lexical_search("peanuts recipe")', maya.lexical_search("peanuts recipe")),
            ('maya semantic_search("what is my pet called?")', maya.semantic_search("what is my pet called?", top_k=2)),
            ('maya lexical_search("不吃辣")  (another user\'s words)', maya.lexical_search("不吃辣")),
        ]:
            print(f"\n{title}")
            for hit in page.items or []:
                print(f"  {hit.score:6.3f}  {hit.message_id:12s} {hit.content}")
            if not page.items:
                print("  (no hits)")
        anchor = lin.lexical_search("营业时间").items[0].message_id
        print(f"\nlin  neighbors({anchor!r}, before=1, after=1)")
        for m in lin.neighbors(anchor, before=1, after=1):
            print(f"  {m.message_id:12s} {m.role:9s} {m.content}")
