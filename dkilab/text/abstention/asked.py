"""Does an English reply give the value its question asks for? The reply read with its question (the question rule,
`VERSION`), for replies that say the asked thing is absent from the record ("..., but the exact date is not
specified in the memories", "The memories do not mention ...", "There is no information ...", "an unspecified
location"): real models decline this way while they tell related facts, which reads as an answer when the reply is
read alone.

The question's kind decides what a value is, read in the reply outside its absence statements and not already
in the question:
- *when* (and "what year / month / date"): a date or time: a month, a year, a weekday, "last week", "10 years
  before", "around 19 May";
- *how long*, *how many / much / old*: a duration, a number or an age;
- a yes/no question: a reply that opens with yes or no ("No, there is no evidence she went"), or whose first
  statement says something without a word of absence ("Ana has not been to Rome, as there is no mention of it");
- *who / where / which / what*: a name (a capitalised word), a quoted title or a number.

`asked_decision(question, reply)` -> True (declines: it says the asked value is absent and gives none), False (it
answers: a value of the asked kind, or the yes/no it commits to), None (nothing here to decide: no absence
statement, no question, not English; the detector decides as for the reply alone). For an entity question (who,
where, which, what) a value found leaves the decision to the detector: a decline often names other things.
"""
from __future__ import annotations

import re

VERSION = "1"  # in every abstention detector's card: a change re-scores the cells that read it

_CJK = re.compile(r"[\u4e00-\u9fff]")
_ABSENT = re.compile(
    r"\b(?:is|are|was|were|been)\s+not\s+(?:explicitly\s+|specifically\s+|directly\s+|clearly\s+)?(?:specified|"
    r"mentioned|provided|stated|detailed|given|indicated|named|disclosed|noted|recorded|documented|referenced|"
    r"available|included|discussed|known|identified|described)\b"
    r"|\b(?:do|does|did|has|have|had)\s+not\s+(?:explicitly\s+|specifically\s+)?(?:specify|specified|mention|"
    r"mentioned|provide|provided|state|stated|detail|detailed|indicate|indicated|name|named|say|said|share|shared|"
    r"reveal|revealed|include|included|contain)\b"
    r"|\b(?:doesn't|don't|didn't|hasn't|haven't)\s+(?:specify|mention|provide|say|state|indicate|name)\b"
    r"|\bthere\s+(?:is|are|was|were)\s+no\s+(?:specific\s+|explicit\s+|clear\s+|direct\s+|further\s+)?(?:information|"
    r"mention|record|evidence|indication|details?|data|reference)\b"
    r"|\bno\s+(?:specific\s+|explicit\s+|exact\s+|clear\s+)?(?:information|mention|details?|record|evidence|"
    r"indication)\b"
    r"|\bunspecified\b|\bit\s+is\s+unclear\b|\bremains\s+unclear\b|\bcannot\s+be\s+(?:determined|confirmed|inferred)\b"
    r"|\bnot\s+(?:specified|mentioned|stated|provided)\b", re.I)
_SPLIT = re.compile(r"(?<=[.;!?])\s+|\s*[,;:]\s+|\s+(?=(?:but|although|though|however|while)\b)", re.I)
_YES_NO_Q = re.compile(r"^\s*(?:is|are|was|were|do|does|did|has|have|had|would|could|can|will|should|might|may)\b",
                       re.I)
_OPENS_YES_NO = re.compile(r"^\s*(?:yes|no)\b(?!\s+(?:evidence|information|mention|record|specific|details?)\b)",
                           re.I)
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|"
          r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_UNIT = r"(?:minutes?|hours?|days?|weeks?|weekends?|months?|years?|decades?)"
_NUMBER = (r"(?:\d+(?:[.,]\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
           r"thirty|forty|fifty|a few|several|a couple of|a|an)")
_DATE = re.compile(rf"\b(?:{_MONTH}\b|(?:19|20)\d\d\b|(?:mon|tues|wednes|thurs|fri|satur|sun)day\b|"
                   rf"(?:last|next|this|that|previous|following)\s+(?:week|weekend|month|year|summer|winter|spring|"
                   rf"fall|autumn)\b|{_NUMBER}\s+{_UNIT}\s+(?:ago|before|after|earlier|later)\b|yesterday\b|"
                   rf"(?:early|mid|late)[- ](?:{_MONTH}|(?:19|20)\d\d)|\d{{1,2}}/\d{{1,2}}/\d{{2,4}})", re.I)
_DURATION = re.compile(rf"\b{_NUMBER}\s+{_UNIT}\b|\b(?:a|one)\s+(?:week|month|year|day)\b|\b(?:nearly|about|almost|"
                       rf"around|over)\s+{_NUMBER}\b", re.I)
_COUNT = re.compile(r"\b\d+(?:[.,]\d+)?\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                    r"dozens?|hundreds?|thousands?)\b|\b(?:early|mid|late)[- ]?(?:to[- ]mid[- ])?\d0s\b|\b\d0s\b",
                    re.I)
_NAME = re.compile(r"\"[^\"]+\"|“[^”]+”|(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z'’-]+\b")
_COMMON = {"i", "the", "a", "an", "however", "but", "memories", "memory", "conversation", "conversations", "he",
           "she", "they", "it", "there", "this", "that", "his", "her", "their", "while", "although", "yes", "no"}


def question_kind(question: str) -> str:
    q = question.strip().lower()
    if re.match(r"^(?:when\b|what\s+(?:year|month|date|day|time)\b|which\s+(?:year|month|date|day)\b|in\s+which\s+"
                r"(?:year|month)\b|at\s+what\s+time\b)", q):
        return "when"
    if re.match(r"^how\s+long\b", q):
        return "duration"
    if re.match(r"^how\s+(?:many|much|old|often)\b", q):
        return "count"
    if _YES_NO_Q.match(q):
        return "yes_no"
    return "entity"


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z0-9']+", text)}


def _outside(reply: str) -> list[str]:
    """The reply's statements without an absence statement in them."""
    return [p for p in _SPLIT.split(reply) if p and p.strip() and not _ABSENT.search(p)]


def _value(kind: str, parts: list[str], asked: set[str]) -> bool:
    pattern = {"when": _DATE, "duration": _DURATION, "count": _COUNT}.get(kind)
    for part in parts:
        if pattern is not None:
            if any(not _words(m.group(0)) <= asked for m in pattern.finditer(part)):
                return True
            continue
        for m in _NAME.finditer(part.strip()):
            w = m.group(0).strip("\"“”").lower()
            if w not in asked and w not in _COMMON and not _words(w) <= asked:
                return True
    return False


def asked_decision(question: str | None, reply: str) -> bool | None:
    """True: declines (says the asked value is absent and gives none); False: answers; None: not decided here."""
    if not question or not reply or _CJK.search(reply) or not _ABSENT.search(reply):
        return None
    kind = question_kind(question)
    asked = _words(question)
    parts = _outside(reply)
    if kind == "yes_no":
        first = _SPLIT.split(reply.strip())[0]
        return not (_OPENS_YES_NO.match(reply) or (first and not _ABSENT.search(first) and not re.match(
            r"^\s*(?:the|there|it)\b", first, re.I)))
    found = _value(kind, parts, asked)
    if kind == "entity":
        return None if found else True
    return not found
