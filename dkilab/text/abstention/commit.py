"""Does a reply commit to a value for what was asked? (abstention rules version 14)

A reply abstains only when no part of it commits to an answer. Real chat models often open a committed answer
with a concession, a hedge or a negation ("You didn't say the exact day, but you mentioned the trip was in early
March", "不用担心，你的血型是O型阴性，你献血之后提到过"), and often decline and then guess. `commitment` reads the reply
as segments (cut at sentence ends, commas, colons and contrasts) and finds a *value segment* (no word of absence,
no word of knowing or telling, not the answerer speaking of itself, not a question) tied to the reply by one of:

- a report of what the user said: "you mentioned / you said / you did tell me (that) VALUE", "你提到过 / 你说过 VALUE";
- an attribution beside it: "VALUE, as you told me before", "From what you said, VALUE", "VALUE，这是你之前告诉我的",
  "按你说的，VALUE";
- a contrast before it: "I don't have the room number, but VALUE", "不过VALUE";
- a correction before it: "Not Oakwood: VALUE", "It wasn't late March. VALUE", "不是三月底，VALUE";
- a reassurance or a regret before it: "No need to worry, VALUE", "不用担心，VALUE", "很遗憾，和你希望的不一样：VALUE";
- a yes or no before it: "No, VALUE", "没有，按你说的，…。VALUE".

A guess with a value ("If I had to guess, I'd say Leeds", "My best guess would be Sarah", "我猜是苏州", "可能是蓝色？")
commits too; after a decline ("I don't actually know ...", "你没提过 ...") the reply is a `hedged_guess`: it counts as
answering for `hallucination_rate` and is reported apart (`reply_kind`).

    commitment("You didn't say the exact day, but you mentioned the trip was in early March.")  # "answer"
    commitment("你没提过你的老家，所以我只能猜：可能是苏州？")                                       # "hedged_guess"
    commitment("I don't think you ever told me your sister's name.")                          # None
"""
from __future__ import annotations

import re
from typing import Literal

from dkilab.text.abstention.rules import CUES, EN_ABOUT_KNOWING, SPEAKER, WH, ZH_ABOUT_KNOWING, masked, rule_decision

Kind = Literal["abstain", "answer", "hedged_guess"]

_CJK = re.compile(r"[\u4e00-\u9fff]")
_TOPIC = re.compile(r"^(?:关于|至于|对于|说到|about(?!\s+\d)|regarding|as for|as to)", re.I)
_YES_NO = re.compile(r"^(?:yes|yeah|yep|no|nope|没有|没|不是|不|是的|是|对|没错)$", re.I)
_EN_CONTRAST = r"(?:but|though|although|however|still|yet|and|so)"
_CUT = re.compile(rf"[.;!?。；！？…]+\s*|[,，:：、]\s*|\s+(?={_EN_CONTRAST}\b)|(?=(?:不过|但是|可是|但|所以)(?!是))",
                  re.I)
_LEAD = re.compile(rf"^(?:(?:{_EN_CONTRAST}|actually|well|also|then|anyway)\b|不过|但是|可是|但|所以|其实|而且)\s*",
                   re.I)
_CONTRAST = re.compile(r"^(?:(?:but|though|although|however|still|yet)\b|不过|但是|可是|但)", re.I)

# a report of what the user said: the value follows it in the same segment
_EN_REPORT = re.compile(r"^(?:as )?you (?:did |also |once |already |definitely )?(?:mention(?:ed)?|said|say|told me|"
                        r"tell me|told us|wrote|shared|let me know)(?: (?:before|earlier|once|last time|"
                        r"previously))?(?: that)?\s+(?P<v>.+)$", re.I)
_ZH_REPORT = re.compile(
    r"^你(?:确实|之前|以前|上次|也)?(?:跟我|和我|对我)?(?:提到过|提过|提到|说过|讲过|告诉过我|告诉我)(?:了)?(?P<v>.+)$")
# attributions: a segment that only says where the value came from
_EN_ATTRIBUTION = re.compile(
    r"^(?:(?:as|like) you (?:told me|said|mentioned|wrote)|(?:from|going by|according to|"
    r"based on) (?:what you (?:told me|said|mentioned|wrote)|our (?:earlier |last |previous )?(?:chats?|conversations?|"
    r"talk))|you (?:mentioned|said|told me) (?:it|that|so)|as far as you told me|so that'?s my answer|"
    r"that'?s what you told me)\b", re.I)
_ZH_ATTRIBUTION = re.compile(r"^(?:按你说的|按照你说的|照你说的|根据你说的|据你说|你(?:之前|以前|"
                             r"上次)?(?:跟我)?(?:说过|提过|讲过)的?|这是你(?:之前|以前|上次)?(?:告诉我|跟我说|说|提)的|"
                             r"这是我们(?:之前|以前|上次)?聊到的|你上次聊到的时候提过|所以答案就是这个|你之前说过)")
# a correction, a reassurance or a regret, a yes or a no: what may open a committed answer
_EN_OPENER = re.compile(
    r"^(?:(?:no|nope|not|it wasn't|it isn't|it's not|that wasn't|that's not) (?!(?:sure|certain|something|anything|"
    r"much|that|idea|clue|record|information|details?|mentioned|told)\b)[\w' -]{1,30}|no need to worry|don't worry|"
    r"not to worry|good news|unfortunately|sadly|i'm afraid|unfortunately it'?s not what you hoped|"
    r"it'?s not what you hoped|yes|yeah|yep|no|nope)$", re.I)
_ZH_OPENER = re.compile(
    r"^(?:不是[\u4e00-\u9fffA-Za-z0-9]{1,12}|不用担心|别担心|放心|很遗憾|可惜|和你希望的不一样|没有|不是|不|是的|对|"
    r"没错|嗯)$")

# a guess with a value
_EN_GUESS = re.compile(
    r"(?:\bif i (?:had|have) to guess\b[, ]*(?:i'?d say|i would say|i'?d guess|it'?s|it would be|probably|maybe)?|"
    r"\bmy (?:best |only )?guess (?:would be|is|'d be)|\bi'?d (?:guess|say|bet)|\bi would (?:guess|say|bet)|"
    r"\b(?:probably|maybe|perhaps|possibly|likely)\b)\s*:?\s*(?P<v>.*)$", re.I)
_ZH_GUESS = re.compile(r"(?:硬要猜的话|要我猜的话|如果要猜的话?|我(?:最好的)?猜测?(?:是|的话)?|(?:最好的)?猜测是|"
                       r"只能猜|我觉得是|可能是|也许是|大概是|估计是|或许是|应该是|多半是)(?P<v>.*)$")
_DECLINE = re.compile(
    r"\b(?:not?|never|nothing|none|unsure|unknown|uncertain|unclear|lack\w*|without)\b|n't|[不没无未]", re.I)


def _segments(text: str) -> list[str]:
    out = []
    for s in _CUT.split(text):
        s = s.strip(" \"'“”‘’()（）")
        if s:
            out.append(s)
    return out


def _is_value(seg: str, min_words: int = 2) -> bool:
    """No word of absence, of knowing or telling, not the answerer of itself, not a question, not a topic."""
    body = _LEAD.sub("", masked(seg)).strip()
    if not body or CUES.search(body) or WH.search(body) or _TOPIC.match(body):
        return False
    named = bool(re.search(r"\d|TITLE|QUOTE", body))
    if _CJK.search(body):
        return (named or len(_CJK.findall(body)) >= 2) and not ZH_ABOUT_KNOWING.search(body) \
            and not re.search(r"[我吗呢]|对话|的话", body) and not body.startswith("的")
    words = re.findall(r"[A-Za-z0-9']+", body)
    return (named or len(words) >= min_words) and not EN_ABOUT_KNOWING.search(body) and not SPEAKER.search(body) \
        and not re.match(r"^(?:if|please|feel free)\b", body, re.I)


def _negated_fact(seg: str) -> bool:
    """A negated statement about the story, not about knowing or telling, not by the answerer: "it wasn't
    cancelled", "you didn't sell the bike", "你没搬去柏林" (after a yes or a no, it is the answer)."""
    body = _LEAD.sub("", masked(seg)).strip()
    if not body or WH.search(body):
        return False
    if _CJK.search(body):
        return not ZH_ABOUT_KNOWING.search(body) and "我" not in body and not re.search(r"对话|聊天|记录", body)
    return not EN_ABOUT_KNOWING.search(body) and not SPEAKER.search(body) and len(body.split()) >= 2


def _topic_then_decline(segs: list[str], k: int) -> bool:
    """Segment k is the topic of a decline that follows: "你提到的那个物业经理，我对他一无所知"."""
    if k + 1 >= len(segs):
        return False
    nxt = _LEAD.sub("", segs[k + 1]).strip()
    if (_ZH_ATTRIBUTION if _CJK.search(nxt) else _EN_ATTRIBUTION).match(nxt):
        return False
    return bool(CUES.search(masked(nxt))) and bool(SPEAKER.search(nxt))


def _guess(segs: list[str]) -> tuple[int, int] | None:
    """(segment, where its guess marker starts) of the first guess with a value: the marker's own rest, or the next
    segment ("If I had to guess, I'd say Leeds"); a guess may be one word ("I'd guess blue")."""
    for k, seg in enumerate(segs):
        m = (_ZH_GUESS if _CJK.search(seg) else _EN_GUESS).search(seg)
        if not m:
            continue
        value = m.group("v").strip(" ：:，,") or (segs[k + 1] if k + 1 < len(segs) else "")
        if value and _is_value(value, min_words=1):
            return k, m.start()
    return None


def commitment(answer: str) -> Kind | None:
    """"answer" or "hedged_guess" when a segment commits to a value (see the module docstring); None otherwise (the
    other rules and the learned component decide)."""
    text = answer.strip()
    segs = _segments(text)
    if not segs:
        return None
    guess = _guess(segs)
    if guess is not None:  # a decline before the guess makes it a hedged guess
        k, start = guess
        return "hedged_guess" if _DECLINE.search(masked(" ".join(segs[:k]) + " " + segs[k][:start])) else "answer"
    yes_no = bool(_YES_NO.match(segs[0]))
    for k, seg in enumerate(segs):
        if _topic_then_decline(segs, k):
            continue
        bare = _LEAD.sub("", seg).strip()
        m = (_ZH_REPORT if _CJK.search(bare) else _EN_REPORT).match(bare)
        if m and _is_value(m.group("v")):
            return "answer"
        if yes_no and k == 1 and _negated_fact(seg):
            return "answer"  # "No, it wasn't cancelled", "没有，你没搬去柏林"
        if not _is_value(seg):
            continue
        if yes_no and k > 0:
            return "answer"  # "No: you haven't been to Lisbon. You only went to Porto."
        prev = _LEAD.sub("", segs[k - 1]).strip() if k else ""
        nxt = segs[k + 1] if k + 1 < len(segs) else ""
        attributed = any(s and (_ZH_ATTRIBUTION if _CJK.search(s) else _EN_ATTRIBUTION).match(_LEAD.sub("", s).strip())
                         for s in (prev, nxt))
        contrasted = k > 0 and bool(_CONTRAST.match(seg))
        opened = k > 0 and bool((_ZH_OPENER if _CJK.search(prev) else _EN_OPENER).match(prev))
        if attributed or contrasted or opened:
            return "answer"
    return None


def reply_kind(answer: str, abstains: bool) -> Kind:
    """What a reply is, given the detector's verdict: an abstention, an answer, or a guess after a decline."""
    if abstains:
        return "abstain"
    return "hedged_guess" if commitment(answer) == "hedged_guess" else "answer"


def sure_decision(answer: str) -> bool | None:
    """The hybrid detector's sure verdict: a reply that commits to a value answers (False); otherwise the sure rules
    (`rule_decision`: True, False, or None for the learned component)."""
    return False if commitment(answer) else rule_decision(answer)
