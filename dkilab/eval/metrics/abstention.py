"""Does an answer abstain ("not mentioned", "I don't know", "没有提到", "无法确定")?"""
from __future__ import annotations

import re

_EN = [
    r"\bnot (?:been |ever )?(?:mentioned|stated|specified|provided|given|said|discussed|recorded|available|known|clear|sure)\b",
    r"\bno (?:information|info|mention|record|details?|data|evidence|indication)\b",
    r"\b(?:do not|don't|dont|cannot|can't|can not|couldn't|could not|did not|didn't) (?:know|recall|remember|find|say|tell|determine|see|have (?:that|this|any|enough))\b",
    r"\b(?:i'm|i am) (?:not sure|unsure|unable|afraid i)\b",
    r"\bunknown\b", r"\bunanswerable\b", r"\bnot in (?:the |my )?(?:memory|history|conversation|context|records?)\b",
    r"\b(?:never|nowhere) (?:mentioned|said|told|stated)\b", r"\bthere is no\b.*\b(?:mention|information|record)\b",
    r"\bhaven't (?:mentioned|told|said)\b", r"\bhasn't been (?:mentioned|said|shared)\b",
    r"\b(?:wasn't|was not|isn't|is not|weren't) (?:mentioned|shared|discussed|specified|told)\b",
    r"\bno way to (?:know|tell)\b", r"\binsufficient information\b", r"\bnot enough (?:information|context)\b",
]
_ZH = [
    r"没有(?:提到|提及|说过|讲过|记录|相关|信息|资料|说明|明确)", r"未(?:提到|提及|说明|记录|明确|告知)",
    r"(?:不|无法|没法|不能)(?:确定|知道|得知|回答|判断|确认)", r"不清楚", r"不知道", r"无从(?:得知|知晓|判断)",
    r"(?:记忆|历史|对话|记录)(?:中|里)?(?:没有|并无|未)", r"无(?:相关)?(?:信息|记录)", r"并未(?:提|说)",
    r"不记得", r"没(?:提过|说过|讲过)",
]
_RE = re.compile("|".join(f"(?:{p})" for p in _EN + _ZH), re.IGNORECASE)


def is_abstention(answer: str) -> bool:
    return bool(_RE.search(str(answer or "").replace("’", "'")))
