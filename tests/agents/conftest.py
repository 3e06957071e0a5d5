from datetime import datetime, timedelta, timezone

import pytest
from dkilab.types import Message

T0 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)


def chat(user: str, turns, prefix: str | None = None, start: datetime = T0) -> list[Message]:
    """[(day, role, text)] -> messages `{prefix}#{i}` of `user`, one session per day."""
    prefix = prefix or user
    return [Message(f"{prefix}#{i}", user, f"{prefix}-d{day}", i, role, text,
                    start + timedelta(days=day, minutes=2 * i))
            for i, (day, role, text) in enumerate(turns)]


ALICE = [(0, "user", "我叫王芳，在杭州一家银行做风控。"), (0, "assistant", "好的王芳。"),
         (2, "user", "我特别能吃辣，川菜湘菜都爱。"), (2, "assistant", "记住了。"),
         (5, "user", "帮我查一下明天的天气。"), (5, "assistant", "明天晴。"),
         (20, "user", "医生说我胃不好，我现在不吃辣了。"), (20, "assistant", "好的，以后推荐清淡的。"),
         (21, "user", "我对花生过敏，千万别推荐带花生的菜。"), (21, "assistant", "明白。")]
NOW = T0 + timedelta(days=25)


@pytest.fixture
def alice_store(store):
    store.add_messages(chat("alice", ALICE, "a"))
    return store
