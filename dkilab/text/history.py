"""How one history message reads in a prompt, for every strategy alike (a fair comparison needs the same
fields in every layout): `[2023-05-08 13:56] Caroline: text`.

`fields` picks what a line carries besides the text: `time` (the message's timestamp) and `speaker` (the
speaker's name where the data gives one, else the role name). Without `speaker` the role name is shown;
`fields=()` is the seed's own layout (`用户: ...` / `User: ...`). A strategy's `history_fields` param sets it.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

HistoryField = Literal["time", "speaker"]
DEFAULT_FIELDS: tuple[HistoryField, ...] = ("time", "speaker")
ROLE_NAME = {"cn": {"user": "用户", "assistant": "助手", "system": "系统"},
             "en": {"user": "User", "assistant": "Assistant", "system": "System"}}


def role_name(role: str | None, lang: str) -> str:
    return ROLE_NAME["cn" if lang == "cn" else "en"].get(role or "", role or "")


def who(role: str | None, speaker: str | None, lang: str, fields=DEFAULT_FIELDS) -> str:
    """The speaker's name when `speaker` is a field and the data names one, else the role name."""
    return speaker if ("speaker" in fields and speaker) else role_name(role, lang)


def when(timestamp: datetime | None, fields=DEFAULT_FIELDS) -> str:
    """`2023-05-08 13:56`, or "" when time is not a field (or the message has no timestamp)."""
    return f"{timestamp:%Y-%m-%d %H:%M}" if ("time" in fields and timestamp is not None) else ""


def render_line(content: str, role: str | None, lang: str, timestamp: datetime | None = None,
                speaker: str | None = None, fields=DEFAULT_FIELDS) -> str:
    """One history line: `[time] who: content` (the time part only when it is a field and known)."""
    t = when(timestamp, fields)
    name = who(role, speaker, lang, fields)
    return (f"[{t}] " if t else "") + (f"{name}: " if name else "") + content
