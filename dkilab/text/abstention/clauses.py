"""Does an answer abstain? The protocol phrase prompts ask for, and a structural detector.

An answer abstains when what it asserts is the absence of the information (the conversation, the
memory or the speaker does not have it) and it asserts no answer content. So the detector decides on
the answer as a whole, clause by clause:

1. quoted speech and titles become a placeholder (what someone said is content, whatever it says);
2. the answer is cut into clauses (sentences, commas, "but", "不过" ...);
3. each clause is *filler* (apologies, "based on our conversations", a request to tell again, a
   protocol prefix like "Answer:"), *absence* (the information is missing: "not mentioned", "you never
   told me where ...", "I don't know", "对话中没有提到", "无法确定" — a negation whose subject is the
   answerer, the user, the conversation or nobody, or a passive "was never mentioned"), or *content*;
   a negation about a person in the story ("She didn't know about the party until Friday",
   "她不知道那天会下雨") is content;
4. the answer abstains iff it has an absence clause and no content clause. A hedged answer ("I'm not
   sure, maybe Paris") asserts content: it is an answer, and on an unanswerable question a
   hallucination.

Measured on the labelled phrasings in `datasets/fixtures/abstention/` (`dkilab bench abstention`).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from dkilab.text.segment import _jieba

# --- English -----------------------------------------------------------------------------------
_MENTION = (r"(?:mention(?:ed|ing)?|sa(?:y|id|ying)|t(?:ell|old|elling)|shar(?:e|ed|ing)|discuss(?:ed|ing)?|"
            r"talk(?:ed)? about|br(?:ing|ought) up|specif(?:y|ied)|stat(?:e|ed)|giv(?:e|en)|provid(?:e|ed)|"
            r"record(?:ed)?|not(?:e|ed)|writ(?:e|ten)|cover(?:ed)?|includ(?:e|ed)|disclos(?:e|ed)|reveal(?:ed)?|"
            r"show(?:n|ed)?|contain(?:ed)?)")
_KNOW = (r"(?:know|recall|remember|find|locate|say|tell|determine|see|answer|be (?:sure|certain)|confirm|provide|give|"
         r"share|offer|work (?:that|it) out|figure (?:that|it) out)")
_NEG = r"(?:not|n't|never|no longer)"
_SOURCE = (r"(?:the|our|my|your|these|those|any|past|previous)?\s*(?:past |previous |earlier )?"
           r"(?:conversation|conversations|chat|chats|chat history|conversation history|history|memory|memories|"
           r"records?|context|messages|notes|logs?|transcripts?|data)")
_INFO_NOUN = (r"(?:name|names|date|dates|day|time|year|month|price|cost|amount|number|address|place|location|venue|"
              r"reason|age|title|details?|job|city|country|colou?r|brand|model|school|company|score|result|"
              r"breed|size|type|kind|specifics)")

_EN_ABSENCE = [re.compile(p, re.I) for p in (
    # fragments and protocol phrases
    r"^(?:it(?:'s| is| was)|that(?:'s| is| was)|this is|the answer is)?\s*(?:not|never) (?:been |ever )?"
    r"(?:mentioned|stated|specified|given|recorded|said|discussed|known|available|provided|clear)\b",
    r"^(?:the answer is |it(?:'s| is) |that(?:'s| is) )?(?:unknown|unclear|uncertain|unanswerable|n/?a)\b",
    r"^(?:(?:i have |i've got |i've )?no (?:idea|clue)|not sure|unsure|hard to say|can't say|cannot say|"
    r"no way to (?:know|tell)|insufficient (?:information|info|data|context)|"
    r"not enough (?:information|info|context|data)|nothing on (?:that|it|this))\b",
    r"^no (?:information|info|mention|record|records|details?|data|evidence|indication|answer)\b",
    # first person: what the answerer knows or can find
    rf"^(?:i|we)(?: really| honestly| just| simply| still| actually)? (?:do|did|can|could|am|'m|was|have|has)?\s*"
    rf"{_NEG}\s*(?:able to |unable to )?{_KNOW}\b",
    rf"^(?:i|we)(?:'m| am| was)? (?:unable|not able) to {_KNOW}\b",
    r"^(?:i|we)(?: really)? (?:don't|do not|didn't|did not) have (?:that|this|it|any|enough|a record|the|such|"
    r"access|information|info|details?|records?)\b",
    r"^(?:i|we)(?:'m| am| are|'re)? (?:not |un)(?:sure|certain|(?:100|a hundred) ?%? sure)\b",
    r"^(?:i|we)(?:'m| am| are|'re)? not (?:familiar with|aware of)\b",
    r"^(?:i(?:'m| am) afraid|sorry|unfortunately)?,?\s*i (?:can't|cannot|can not|couldn't|could not) "
    rf"(?:{_KNOW}|help with that)\b",
    r"^i wish i knew\b",
    r"^(?:i|we) (?:have|'ve got) nothing (?:on|about)\b",
    rf"^(?:i )?(?:don't|do not) (?:think|believe) (?:you|we|that|it|this|they)\b.*\b(?:ever|never)?\s*"
    rf"(?:{_MENTION}|came up|come up|talked)\b",
    rf"^(?:i )?(?:don't|do not) (?:believe|think) (?:that|it|this) (?:was|has been|were) (?:ever )?{_MENTION}\b",
    r"^i (?:don't|do not|can't|cannot) (?:recall|remember) (?:you|us|we|anyone|anybody)\b",
    # the user or both of us never said it
    rf"^(?:you|we|you two|both of you|the user|user|neither of (?:you|us|them)|nobody|no one|none of (?:you|us|them))"
    rf"(?:'ve|'d| have| has| had| did| do| does| were| was)?\s*(?:{_NEG}|ever)?\s*(?:ever |yet |really )?"
    rf"(?:{_MENTION}|come up|came up|talked)\b",
    r"^(?:you|we|the user)(?: two)? (?:haven't|have not|hasn't|has not|didn't|did not|never) "
    rf"(?:ever )?(?:{_MENTION}|{_KNOW}|talked|come up)\b",
    # the conversation / memory / records do not have it
    rf"^{_SOURCE}\s*(?:does|do|did|has|have)?\s*(?:not|n't|never)\s*(?:{_MENTION}|say|show|have|hold|"
    rf"contain|mention|cover|include|appear)\b",
    rf"^{_SOURCE} (?:has|have|holds?) (?:nothing|no)\b",
    rf"\b(?:not|isn't|is not|wasn't|nothing|isn't anything) (?:anywhere )?(?:in|from|within) {_SOURCE}\b",
    rf"^(?:it|that|this|these|those)(?:'s| is| are| was| were)? (?:not|n't|never)?\s*(?:anywhere )?"
    rf"(?:in|from|within|part of) {_SOURCE}\b",
    r"\b(?:doesn't|does not|didn't|did not|don't|do not) appear (?:anywhere )?(?:in|within)\b",
    r"^(?:it|that|this|that topic|the topic|this topic)(?: has| had| did| does)?\s*(?:never|not|n't)?\s*(?:ever )?"
    r"(?:come|came) up\b",
    r"\bmissing from\b", r"\b(?:unclear|not clear) (?:from|in)\b",
    rf"^(?:that|this|it)(?:'s| is) not something (?:you|we)(?:'ve| have)? (?:ever )?{_MENTION}\b",
    # passive: the information was never given (any subject: "the exact date wasn't mentioned")
    rf"\b(?:is|are|was|were|has been|have been|had been|'s)\s*(?:not|n't|never)\s*(?:been\s*)?(?:ever\s*)?"
    rf"(?:{_MENTION}|brought up)\b",
    rf"\b(?:has|have|had)\s*(?:not|n't|never)\s*(?:ever\s*)?been\s*(?:{_MENTION}|brought up)\b",
    rf"\b(?:isn't|aren't|wasn't|weren't|hasn't been|haven't been|hadn't been)\s*(?:ever\s*)?"
    rf"(?:{_MENTION}|brought up)\b",
    rf"^(?:nothing|no details?|no information|none)(?: at all)? (?:was|were|has been|is|had been) "
    rf"(?:ever )?(?:{_MENTION})\b",
    # existential: there is no mention / information
    r"^there(?:'s| is| was| are| were| isn't| wasn't| aren't| weren't)?(?: not)?\s*(?:no|any|enough|sufficient|nothing)"
    r"\s*(?:(?:specific|relevant|other|further|"
    r"such|any) )?(?:mention|information|info|record|records|details?|data|evidence|indication|way to "
    r"(?:tell|know|say)|answer|trace|reference|note)\b",
    r"^there(?:'s| is| was)? nothing (?:about|on|regarding|in|that)\b",
    rf"^nothing (?:in|from) {_SOURCE}\b",
    r"\bcan(?:'t|not| not) (?:be )?(?:determined|confirmed|answered|found|known)\b",
)]

_EN_THIRD = re.compile(r"^(?:(?i:he|she|they|his|her|their)|[A-Z][a-z]+(?: [A-Z][a-z]+)?)\b")
# capitalised sentence starters that are not people in the story
_EN_STARTERS = {"you", "your", "we", "our", "it", "its", "that", "this", "these", "those", "there", "the", "my", "me",
                "nothing", "nobody", "no", "not", "neither", "none", "sorry", "unfortunately", "based", "as", "looking",
                "hmm", "unknown", "insufficient", "answer", "a", "an", "what", "which", "any", "everything", "yes",
                "maybe", "perhaps", "probably", "possibly", "likely", "well", "oh", "ah", "ok", "okay", "i'm", "i've",
                "honestly", "according", "from", "having", "as", "in", "on", "at", "to", "from", "for", "with", "if"}
_EN_THIRD_MENTION = re.compile(
    rf"^(?P<subj>[\w' ]+?) (?:(?:has|have|had|did|does|do|was|were|is)\s*)?(?:n't|not|never)\s*(?:ever )?"
    rf"(?P<verb>{_MENTION})\b(?P<rest>.*)$", re.I)
EN_FILLER = [re.compile(p, re.I) for p in (
    r"^(?:(?:i'm |i am )?sorry|i apologi[sz]e|apologies) for (?:any|the) "
    r"(?:confusion|inconvenience|misunderstanding)\b",
    r"^(?:sorry|i'm sorry|i am sorry|apologies|my apologies|unfortunately|sadly|hmm+|um+|well|oh|ah|ok|okay|"
    r"alas|i'm afraid|i am afraid|honestly|to be honest)\b[,.!]?",
    r"^(?:answer|a|reply|response|the answer is|final answer)\s*[:\-]",
    r"^(?:based on|according to|from|judging by|looking (?:through|at|over)|going by|having (?:checked|looked))"
    r"\b.*$",
    r"^(?:i've|i have) (?:checked|looked (?:through|at|over)|searched|gone through)\b.*?(?:\band\b|$)",
    r"^as far as (?:i can tell|i know|i remember|i recall)\b",
    r"^(?:is there|anything else|can i help|would you like|do you want|let me know)\b.*$",
    r"^(?:could|can|would|will) you\b.*$", r"^(?:please|you could|you can|you might|you may|you'd have to|"
    r"you would have to|you'll have to|maybe you could|perhaps you could)\b.*\b(?:tell|remind|check|share|"
    r"let me know|look|ask|again)\b.*$",
    r"^(?:but|and|so|though|although|however|also|just)\b",
)]

# --- Chinese -----------------------------------------------------------------------------------
_ZH_SOURCE = r"(?:对话|聊天|聊天记录|记录|记忆|历史|历史记录|上下文|资料|之前的聊天|我们的对话|对话内容|消息|信息里)"
_ZH_SAY = r"(?:提到|提及|提过|提起|提|说过|说明|说|讲过|讲|告诉|聊过|聊到|聊|讨论过|讨论|记录|出现|给出|透露|写)"
_ZH_INFO = (r"(?:信息|记录|内容|资料|印象|记忆|答案|说明|细节|数据|情况|消息|线索|依据)")
_ZH_ABSENCE = [re.compile(p) for p in (
    rf"^(?:答案[是为：:]?)?(?:并)?(?:没有|没|未|从未|从来没有?|从没)(?:有)?(?:被)?{_ZH_SAY}",
    r"(?:没有|没|未|从未|从来没有?|从没|并未|并没有|都没|也没)(?:有)?(?:人)?(?:被)?(?:(?:跟|和|对|向|给)(?:我|我们|你|"
    fr"您))?{_ZH_SAY}(?:过|到|起)?",
    rf"(?:{_ZH_INFO}|我|我们|这里|这边).{{0,6}}(?:没有|没|无)$",
    rf"{_ZH_SOURCE}(?:中|里|当中|里面|内)?(?:并|也|都)?(?:没有|没|未|无|找不到|查不到|看不出|不包含|不含)",
    rf"(?:没有|没|无|暂无|并无|毫无)(?:任何|相关|这方面的?|足够的?|具体的?|有关的?|此类|该)*{_ZH_INFO}",
    rf"^(?:暂)?无(?:相关)?{_ZH_INFO}", r"^未知", r"答案未知", r"无从(?:得知|知晓|判断|查证)", r"不得而知",
    r"(?:无法|没法|没办法|不能|难以)(?:确定|得知|回答|判断|知道|确认|回复|答复|得出)", r"答不(?:上来|出来)",
    r"(?:回答|答)不了", r"(?:信息|资料|内容|线索)不(?:足|够)",
    r"(?:找不到|查不到|搜不到|没找到|没有找到|未找到|看不出来?|没有发现|没发现|未发现)", r"(?:没有|没)印象",
    r"什么都没(?:说|提|讲)", r"没人(?:提|说|讲)",
)]
_ZH_KNOW = re.compile(r"(?:不|没)(?:太|大|是很|很)?(?:知道|清楚|记得|确定|了解|肯定)|(?:记不清|说不准|说不清)")
_ZH_THIRD = re.compile(r"(?:他|她|它|他们|她们|它们|对方|客户|老板|经理|[A-Za-z]+)")
_ZH_FIRST = re.compile(r"(?:我|我们|您|你|咱们|大家|没人|谁|两位|你们|用户)")
_ZH_WH = re.compile(r"(?:什么|哪|谁|几|多少|怎么|如何|为什么|是否|何时|何地)")
ZH_FILLER = [re.compile(p) for p in (
    r"^(?:抱歉|对不起|很抱歉|非常抱歉|很遗憾|遗憾的是|不好意思|嗯+|呃+|唔|哦|好的|那个|其实|说实话|老实说)[，,。！!]?",
    r"^(?:答案|回答|答复)(?:是|为)?[：:]?", r"^(?:关于|对于|至于)(?:这|那)(?:一点|个|件事|方面|个问题)?$", r"^对此$",
    r"^(?:根据|按照|依据|从|据|看了|翻了|查了|查看了|看过|翻看了|我翻了|我看了|我查了)"
    r".*(?:对话|聊天|记录|所知|来看|看|信息)(?:来看|看来|中|里)?$",
    r"^(?:还有|有没有)(?:其他|别的|什么).*(?:吗|呢)[？?]?$", r"^(?:您|你)(?:能|可以|可否|得|需要|要|方便)(?:再)?.*"
    r"(?:告诉|提醒|查|说|确认|补充).*$", r"^(?:请|麻烦)(?:您|你)?.*(?:告诉|提醒|查|说|补充).*$",
    r"^(?:好像|似乎|看起来|可能|也许|应该|大概|我想|我觉得|我猜|我认为|据我所知)",
    r"^(?:但|但是|不过|可是|只是|而且|并且|所以|然后)",
)]
_ZH_HEDGE_ONLY = re.compile(r"^(?:好像|似乎|看起来|我想|我觉得|我认为|据我所知)")

QUOTED = re.compile(
    r"\"[^\"]*\"|“[^”]*”|「[^」]*」|『[^』]*』|《[^》]*》|‘[^’]*’|(?<![A-Za-z])'(?:[^']|'(?=[A-Za-z]))+'(?![A-Za-z])")
_CLAUSE_SPLIT = re.compile(r"(?<=[.!?。！？；;…])\s*|(?<!\d)[,，、](?!\d)\s*|\s+[-–—]+\s+|[:：]\s+|\s*[—–]{1,2}\s*|"
                           r"\s+(?=(?:but|though|although|however|except|only|just|yet)\b)|(?=(?:但是|不过|可是|只是|"
                           r"但))",
                           re.I)
_WORD = re.compile(r"[A-Za-z0-9]|[\u4e00-\u9fff]")


@dataclass
class Clause:
    text: str
    kind: str  # filler | absence | content


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text or "")).replace("’", "'").replace("‘", "'")
    text = text.strip()
    # an answer that is wholly one quotation (e.g. "\"Not mentioned.\"") is judged on its inside
    m = re.fullmatch(r"[\"“「](.*)[\"”」]\s*[.。]?", text, re.S)
    return m.group(1).strip() if m else text


def strip_fillers(clause: str, fillers: list[re.Pattern]) -> str:
    prev = None
    while prev != clause:
        prev = clause
        for f in fillers:
            clause = f.sub("", clause, count=1).strip(" ,，.。!！?？:：;；-–—")
    return clause


def is_third(core: str) -> bool:
    m = _EN_THIRD.match(core)
    return m is not None and m.group(0).split()[0].lower() not in _EN_STARTERS


def _en_third_person_absence(clause: str) -> bool:
    """'Caroline never mentioned her sister's name' abstains; 'She never mentioned it to her boss' and
    'He never said goodbye to her' are content (a recipient other than me/us, or a non-information object)."""
    m = _EN_THIRD_MENTION.match(clause)
    if not m or not is_third(m.group("subj").strip()):
        return False
    rest = re.sub(r"^\s*(?:to )?(?:me|us)\b", "", m.group("rest").strip(), flags=re.I).strip(" .,")
    if not rest:
        return True
    if re.search(r"\b(?:to|until|till|at|during|before|after|since|with|only|except|because|so)\b", rest, re.I):
        return False
    return bool(re.match(r"^(?:it|that|this|anything|any of (?:it|that|this)|what|which|where|when|who|whom|whose|"
                         r"why|how|whether|if)\b", rest, re.I)
                or re.search(rf"\b{_INFO_NOUN}\b", rest, re.I))


def _en_kind(clause: str) -> str:
    core = strip_fillers(clause, EN_FILLER)
    if not _WORD.search(core):
        return "filler"
    low = core.lower()
    if any(p.search(low) for p in _EN_ABSENCE) and not is_third(core) or _en_third_person_absence(core):
        return "absence"
    if any(p.search(low) for p in _EN_ABSENCE[:4]):  # a fragment ("Unknown.") whatever its case
        return "absence"
    if is_third(core) and any(p.search(low) for p in _EN_ABSENCE[4:]):
        # "She" / "Melanie" as subject: only the passive and source patterns speak of the information itself
        subj_free = re.sub(r"^[\w' ]+?\b(?=(?:is|are|was|were|has|have|had)\b)", "", low)
        if subj_free != low and any(p.search(subj_free) for p in _EN_ABSENCE[-8:]):
            return "absence"
    return "content"


@lru_cache(maxsize=1)
def _jieba_posseg():
    import jieba.posseg as pseg

    _jieba()  # quiet and initialised

    return pseg


def _zh_subject_is_third(before: str) -> bool:
    if not before:
        return False
    if _ZH_FIRST.search(before):
        return False
    if _ZH_THIRD.search(before):
        return True
    return any(w.flag in ("nr", "nrfg", "nrt") for w in _jieba_posseg().lcut(before))


def _zh_kind(clause: str) -> str:
    core = strip_fillers(clause, ZH_FILLER)
    if not _WORD.search(core):
        return "filler"
    if not re.search(r"[\u4e00-\u9fff]", core):  # "答案是Not mentioned": the rest is English
        return _en_kind(core)
    know = _ZH_KNOW.search(core)
    if know:
        before = core[:know.start()]
        if _zh_subject_is_third(before):
            return "content"
        after = core[know.end():].strip(" 了啊呢吧。.！!")
        # "我不知道" / "这个我不清楚" abstain; "不确定要不要接受" (a decision) is content
        if not after or re.fullmatch(r"(?:这个|这件事|这一点|具体|准确|答案|您说的|你说的|了|啦|呀)+", after) or before:
            return "absence"
        return "content" if re.match(r"(?:要不要|是否|该不该|能不能|会不会)", after) else "absence"
    for p in _ZH_ABSENCE:
        m = p.search(core)
        if not m:
            continue
        before = core[:m.start()]
        if re.search(r"(?:名字|价格|日期|时间|地址|原因|年龄|金额|细节|信息|内容|情况)", before):
            return "absence"  # "她的名字一直没有提到": the information itself was not given
        if _zh_subject_is_third(before):
            after = core[m.end():].strip(" 了啊呢吧")
            if not after or re.match(r"^(?:过|到|起)?(?:我|我们)", after) or _ZH_WH.search(after) or re.search(_ZH_INFO,
                                                                                                         after):
                return "absence"
            if re.search(r"(?:价格|名字|日期|时间|地址|原因|年龄|金额|细节|具体)", after):
                return "absence"
            return "content"
        return "absence"
    return "content"


PREFIX = re.compile(r"^(?:(?:the )?(?:final )?answer(?: is)?|a|reply|response|user|assistant|答案(?:是|为)?|回答|答复|"
                    r"用户|助手)\s*[:：]\s*", re.I)


def clauses(answer: str) -> list[Clause]:
    """The answer cut into clauses, each labelled filler, absence or content."""
    text = QUOTED.sub(" QUOTE ", PREFIX.sub("", normalise(answer)))
    out = []
    for part in _CLAUSE_SPLIT.split(text):
        part = (part or "").strip(" ,，.。!！?？:：;；-–—")
        if not part:
            continue
        cjk = re.search(r"[\u4e00-\u9fff]", part) is not None
        kind = "content" if "QUOTE" in part else (_zh_kind(part) if cjk else _en_kind(part))
        out.append(Clause(part, kind))
    return out


PROTOCOL = re.compile(r"^\s*(?:not mentioned|没有提到)\s*[.。!！]", re.I)
_OFFER = re.compile(r"^(?:but|however|though|although|still|probably|maybe|perhaps|possibly|likely|i think|i believe|"
                    r"i guess|my guess|if i had to|但|但是|不过|可是|可能|也许|大概|估计|我觉得|我猜|我认为|应该)",
                    re.I)


class StructuralDetector:
    """Rule-based, English and Chinese: absence clauses and no content (see the module docstring). An
    answer that opens with the protocol phrase as a whole sentence abstains unless what follows offers an
    answer after all ("Not mentioned. But probably Paris."): a small model often rambles on after it."""

    name = "structural"
    version = "2"

    def is_abstention(self, answer: str) -> bool:
        parts = clauses(answer)
        kinds = [c.kind for c in parts]
        if PROTOCOL.match(PREFIX.sub("", normalise(answer))) and parts and parts[0].kind == "absence":
            return not any(c.kind == "content" and _OFFER.match(c.text) for c in parts[1:])
        return "absence" in kinds and "content" not in kinds

    def decide(self, answer: str) -> tuple[bool, str]:
        """(abstains, the path that decided): always the rules here; the hybrid detector has the same method."""
        return self.is_abstention(answer), "rules"

    def decide_many(self, answers: list[str]) -> list[tuple[bool, str]]:
        return [self.decide(a) for a in answers]

    def explain(self, answer: str) -> list[tuple[str, str]]:
        return [(c.text, c.kind) for c in clauses(answer)]


DETECTOR = StructuralDetector()


def is_abstention(answer: str) -> bool:
    return DETECTOR.is_abstention(answer)
