"""The judge's own errors, measured on every judged cell (`judge: {stress: true}`, the default): beside each judged
answer, three probes built by rule from the question's gold go to the same judge with the same prompt:
- **vague but wrong**: the kind of answer the question asks for with no specifics ("sometime last year", "a family
  member", "a few"; on the question's topic where it can be: "some kind of art" for "What kind of art does she
  make?", "sometime in 2023" for "7 May 2023");
- **wrong specific**: the gold with the value the question asks for changed, and only that (another year, month,
  weekday or count, another relative, name or place, yes for no), or a specific answer of that kind sharing none
  of the gold's words where the gold has no such value;
- **paraphrased correct**: the gold reworded by a rule that keeps its meaning ("7 May 2023" as "May 7, 2023", 3
  as three, a list in another order), framed as a reply; questions whose gold no rule rewords get none.
A judge should reject the first two and accept the third. The cell reports the accept and reject rates with their
intervals beside its score (`judge_accepts_vague`, `judge_accepts_wrong`, `judge_rejects_paraphrase`), and a
judge accepting more than `VAGUE_LIMIT` of the vague answers is flagged (`flags`). The probes are built from
the gold alone, never from the answer under test.
"""
from __future__ import annotations

import hashlib
import re

from dkilab.eval.scoring.base import declare
from dkilab.types import QAItem

VAGUE_LIMIT = 0.10
# what `dkilab report` shows of a judged cell beside its headline: the judge's score and its errors on the probes
JUDGE_COLUMNS = ("judge_score", "judge_accuracy", "judge_accepts_vague", "judge_accepts_wrong",
                 "judge_rejects_paraphrase")
KINDS = ("vague", "wrong", "paraphrase")
FIELDS = {"vague": "stress_vague_accepted", "wrong": "stress_wrong_accepted",
          "paraphrase": "stress_paraphrase_rejected"}

declare("judge_accepts_vague", group="judge",
        field=FIELDS["vague"], subset="answerable", higher_is_better=False, rank=5.1,
        description="share of vague-but-wrong probes (the gold's type, no specifics) the judge accepted")
declare("judge_accepts_wrong", group="judge",
        field=FIELDS["wrong"], subset="answerable", higher_is_better=False, rank=5.2,
        description="share of wrong-specific probes (the gold with its specifics changed) the judge accepted")
declare("judge_rejects_paraphrase", group="judge",
        field=FIELDS["paraphrase"], subset="answerable", higher_is_better=False, rank=5.3,
        description="share of paraphrased-correct probes (the gold, framed as a reply) the judge rejected")

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MONTH = re.compile(r"\b(" + "|".join(_MONTHS + [m[:3] for m in _MONTHS]) + r")\b", re.I)
_DAY = re.compile(r"\b(" + "|".join(_DAYS) + r")\b", re.I)
_YEAR = re.compile(r"\b(19|20)\d{2}\b")
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve"]
_TIMES = {"once": "twice", "twice": "three times", "thrice": "once"}
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS[1:] + list(_TIMES)) + r")\b", re.I)
_ZH = re.compile(r"[\u4e00-\u9fff]")
_ZH_DATE = re.compile(r"\d+\s*[年月日号]|[上下这]个?(?:月|周|星期)|去年|今年|明年|昨天|前天|周[一二三四五六日天]|星期")
_PROPER = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")  # a name, every capitalised word of it
_PERSON = re.compile(r"\b(mother|mom|father|dad|sister|brother|friend|wife|husband|son|daughter|aunt|uncle|"
                     r"grand\w+|cousin|colleague|boss|neighbou?r|partner|kids?|children)\b", re.I)
_KIN = {"mother": "father", "mom": "dad", "father": "mother", "dad": "mom", "sister": "brother",
        "brother": "sister", "wife": "husband", "husband": "wife", "son": "daughter", "daughter": "son",
        "aunt": "uncle", "uncle": "aunt", "friend": "neighbour", "colleague": "cousin", "boss": "landlord",
        "neighbour": "friend", "neighbor": "friend", "partner": "roommate", "cousin": "colleague"}
_ZH_KIN = {"妈妈": "爸爸", "爸爸": "妈妈", "姐姐": "哥哥", "哥哥": "姐姐", "妹妹": "弟弟", "弟弟": "妹妹",
           "儿子": "女儿", "女儿": "儿子", "朋友": "邻居", "同事": "表哥", "老板": "房东", "邻居": "朋友"}
_YES_NO = re.compile(r"^((?:likely|probably|maybe|most likely)\s+)?(yes|no)\b", re.I)
_OTHER_NAMES = ["Priya", "Tomasz", "Ingrid", "Kwame", "Lucia"]
_OTHER_PLACES = ["Lisbon", "Denver", "Osaka", "Nairobi", "Oslo"]
_NOT_NAMES = {"no", "yes", "the", "a", "an", "i", "it", "he", "she", "they", "we", "my", "your", "his", "her", "their",
              "on", "in", "at", "to", "from", "and", "or", "not", "because", "when", "after", "before"}
_ZH_DAYS = "一二三四五六日"
_ZH_NUMERALS = "零一二三四五六七八九十"
_VAGUE = {"yesno": ("possibly", "in some ways"), "date": ("sometime last year", "a while ago"),
          "number": ("a few", "several"), "reason": ("for personal reasons", "because of something in their life"),
          "manner": ("in a way that mattered to them", "it went the way these things go"),
          "person": ("a family member", "someone they know"), "place": ("somewhere nearby", "a place they like"),
          "other": ("something related to their interests", "it had to do with their plans")}
_VAGUE_ZH = {"yesno": ("也许吧", "某种程度上"), "reason": ("出于个人原因",), "manner": ("就是那样",),
             "date": ("去年某个时候", "之前某一天"), "number": ("几个", "好几次"),
             "person": ("一位家人", "一个认识的人"), "place": ("附近某个地方",),
             "other": ("和兴趣有关的事情", "跟计划有关的东西")}
# specific answers for questions whose gold has no value to change, each with the topics it would touch: one is
# offered only where its topic is not the question's or the gold's (no violin for "an instrument")
_UNRELATED = {"a pottery class in Denver": r"art|paint|draw|pott|craft|class|course|workshop|bowl|ceramic|make|made",
              "the red bicycle from the flea market": r"bike|bicycl|cycl|ride|market|shop|buy|bought|color|colour|red",
              "a trip to Lisbon in 2019": r"trip|travel|visit|city|cities|countr|place|vacation|holiday|tour|when",
              "a violin recital at the harbour hall": r"music|musician|instrument|violin|concert|song|band|play|"
                                                      r"perform|event|show",
              "a cookbook about Peruvian soups": r"book|read|author|cook|food|recipe|soup|dish|meal|eat|ingredient|"
                                                r"spice|bake|dessert"}
# what the question asks for, by its wh-word (the gold's own form decides where the question says nothing)
_ASKS = [(re.compile(r"^\s*(when|what (year|month|day|date|time)|which (year|month|day)|how long ago)\b", re.I),
          "date"),
         (re.compile(r"^\s*how (many|much|often|long|old|far)\b", re.I), "number"),
         (re.compile(r"^\s*(who|whom|whose|with whom)\b", re.I), "person"),
         (re.compile(r"^\s*why\b", re.I), "reason"), (re.compile(r"^\s*how\b", re.I), "manner"),
         (re.compile(r"^\s*(where\b|(which|what) (countr(y|ies)|city|cities|states?|towns?|areas?|places?|islands?|"
                     r"regions?)\b)", re.I), "place")]
_ASKS_ZH = [(re.compile(r"什么时候|哪天|哪一天|几月|哪年|几号|星期几|周几"), "date"),
            (re.compile(r"几个|多少|几次|多久|多长"), "number"), (re.compile(r"谁"), "person"),
            (re.compile(r"哪里|哪儿|在哪"), "place")]


def answer_type(gold: str, question: str = "") -> str:
    """yesno, date, number, person, place, reason, manner or other: what kind of answer the question asks
    for, by its wh-word; where it says nothing, a yes or no, a date or a count when that is all the gold is,
    else other; with no question, what kind of answer the gold is, by rule."""
    if _YES_NO.match(gold.strip()):
        return "yesno"
    for pattern, kind in _ASKS_ZH if _ZH.search(question) else _ASKS:
        if question and pattern.search(question):
            return kind
    if question.strip():
        kind = answer_type(gold)
        return kind if kind in ("date", "number") and _only(gold, kind) else "other"
    if _ZH.search(gold):
        if _ZH_DATE.search(gold):
            return "date"
        if re.fullmatch(r"\s*\d+\s*\S{0,2}\s*", gold):
            return "number"
        return "person" if re.search(r"妈|爸|姐|妹|哥|弟|朋友|同事|老板|邻居|孩子|儿子|女儿", gold) else "other"
    if (_YEAR.search(gold) or _MONTH.search(gold) or _DAY.search(gold)
            or re.search(r"\bago\b|\blast (week|month|year)\b", gold, re.I)):
        return "date"
    if re.fullmatch(r"\s*(about |around )?(\d+(\.\d+)?|" + _NUMBER_WORD.pattern + r")\s*\w{0,10}\s*", gold, re.I):
        return "number"
    if _PERSON.search(gold):
        return "person"
    if re.search(r"\b(in|at|to|from)\s+[A-Z]", gold):
        return "place"
    return "other"


_DATE_WORDS = re.compile(r"\b(the|a|an|of|on|in|at|around|about|early|late|mid|week|weekend|day|month|year|weeks|"
                         r"days|months|years|before|after|last|next|ago|few|\d+(st|nd|rd|th)?)\b|[,.]", re.I)


def _only(gold: str, kind: str) -> bool:
    """Whether the gold is a date (a count) and nothing more: "The Friday before 15 July 2023", not "Cyberpunk
    2077"."""
    rest = _DATE_WORDS.sub(" ", _DAY.sub(" ", _MONTH.sub(" ", _YEAR.sub(" ", gold))))
    if kind == "number":
        rest = _NUMBER_WORD.sub(" ", _NUMBER.sub(" ", rest))
        return len(rest.split()) <= 2
    return not rest.split()


def _pick(options, key: str) -> str:
    return options[int(hashlib.sha1(key.encode()).hexdigest(), 16) % len(options)]


def _case(word: str, like: str) -> str:
    return word.capitalize() if like[:1].isupper() else word


def _shift_dates(gold: str) -> str:
    changed = _YEAR.sub(lambda m: str(int(m.group(0)) - 3), gold)
    changed = _MONTH.sub(lambda m: _MONTHS[(next(i for i, x in enumerate(_MONTHS) if x.lower().startswith(
        m.group(0).lower()[:3])) + 5) % 12], changed)
    changed = _DAY.sub(
        lambda m: _DAYS[(next(i for i, x in enumerate(_DAYS) if x.lower() == m.group(0).lower()) + 3) % 7], changed)
    return re.sub(r"(周|星期)([一二三四五六日])", lambda m: m.group(1)
                  + _ZH_DAYS[(_ZH_DAYS.index(m.group(2)) + 3) % 7], changed)


def _shift_numbers(gold: str) -> str:
    changed = _NUMBER.sub(lambda m: (f"{int(m.group(0).replace(',', '')) + 7:,}" if "," in m.group(0)
                                     else str(int(m.group(0)) + 7)), gold)
    if changed == gold:
        changed = _NUMBER_WORD.sub(lambda m: _case(_TIMES.get(m.group(0).lower()) or _NUMBER_WORDS[
            (_NUMBER_WORDS.index(m.group(0).lower()) + 4) % len(_NUMBER_WORDS) or 5], m.group(0)), gold)
    return changed


def _swap_person(gold: str, key: str) -> str:
    changed = re.sub(r"\b(" + "|".join(_KIN) + r")\b", lambda m: _case(_KIN[m.group(0).lower()], m.group(0)), gold,
                     count=1, flags=re.I)
    if changed == gold:
        changed = re.sub("|".join(_ZH_KIN), lambda m: _ZH_KIN[m.group(0)], gold, count=1)
    if changed == gold:
        names = [m for m in _PROPER.finditer(gold)
                 if m.group(0).lower() not in _NOT_NAMES]
        if names:  # the whole name, first and last: "LeBron James" becomes "Kwame", not "LeBron Kwame"
            other = _pick([n for n in _OTHER_NAMES if n not in gold], key)
            changed = gold[:names[0].start()] + other + gold[names[0].end():]
    return changed


def _swap_place(gold: str, key: str) -> str:
    other = _pick([p for p in _OTHER_PLACES if p not in gold], key)
    if _PROPER.fullmatch(re.sub(r"^the\s+", "", gold)):  # a place's name alone: another
        return other
    m = re.search(r"\b(in|at|to|from)\s+((?:[A-Z][\w'-]*\s?)+)", gold)
    if m is None:
        return gold
    return gold[:m.start(2)] + other + (" " if m.group(2).endswith(" ") else "") + gold[m.end(2):]


def _wrong(gold: str, kind: str, key: str, question: str = "") -> str:
    """The gold with the value the question asks for changed, and only that: another date, count, person or
    place; a yes for a no; where the gold has no such value to change, a specific answer sharing none of its
    words and off the question's topic."""
    if kind == "yesno" and (m := _YES_NO.match(gold)) is not None:
        flip = "no" if m.group(2).lower() == "yes" else "yes"
        return gold[:m.start(2)] + _case(flip, m.group(2)) + gold[m.end(2):]
    changed = {"date": _shift_dates, "number": _shift_numbers}.get(kind, lambda g: g)(gold)
    if kind == "date" and changed == gold:  # a relative date: another unit ("a few years ago" -> "a few weeks ago")
        changed = re.sub(r"\b(year|month|week|day)(s?)\b", lambda m: {"year": "week", "month": "day", "week": "year",
                                                                    "day": "month"}[m.group(1).lower()] + m.group(2),
                         gold, count=1, flags=re.I)
    if kind == "person":
        changed = _swap_person(gold, key)
    elif kind == "place":
        changed = _swap_place(gold, key)
    if changed != gold:
        return changed
    if _ZH.search(gold):
        return {"date": "2019年3月14日", "number": "17", "person": "楼下的邻居老陈", "place": "苏州的一家面包店"}.get(
            kind, "一家在苏州新开的面包店")
    words = {w.lower() for w in re.findall(r"\w+", gold)}
    unrelated = [u for u, topic in _UNRELATED.items() if not re.search(topic, f"{question} {gold}", re.I)
                 and not words & {w.lower() for w in re.findall(r"\w+", u)} - _NOT_NAMES]
    # where the gold names no one and no place ("her friends", "a new city"), a claim no such gold allows
    return {"date": "on 14 March 2019", "number": "17", "person": "no one, they did it alone",
            "place": "nowhere, they stayed at home" if "home" not in words else "nowhere, they stayed in"
            }.get(kind) or _pick(unrelated or list(_UNRELATED), key)


_REGIONS = {"Scotland", "England", "Wales", "Ireland", "UK", "USA", "US", "France", "Spain", "Italy", "Germany",
            "Sweden", "Canada", "Mexico", "Japan", "China", "India", "Australia", "Brazil", "California", "Florida",
            "Texas", "Oregon", "Washington", "New York"}
_COMMA_LIST = re.compile(r",(?!\d)\s*(?:(?:and|or)\s+)?|、")
_PAIR = re.compile(r"\s+(?:and|or)\s+|和|或")
# an item that begins with one of these leans on the others ("but not ...", "with natural light", "her mentors")
_LEANS = re.compile(r"^(but|with|by|to|for|and|or|so|because|she|he|they|it|his|her|their|its|the girl)\b", re.I)


def _reorder_list(gold: str) -> str:
    """A list of short items in reverse order, its last connector kept ("and" / "or"): items separated by commas,
    or two single words joined by "and" / "or" ("drama and romance"; "red and purple lighting" shares a word and
    is left alone); clauses, dates, quoted titles and items whose head the others share are no lists."""
    if "," in gold or "、" in gold:
        parts = [p.strip() for p in _COMMA_LIST.split(gold) if p.strip()]
        tail = [p.strip() for p in _PAIR.split(parts[-1], maxsplit=1)] if parts else []
        if len(tail) == 2 and len(tail[1].split()) <= len(tail[0].split()) <= 2:  # "a, b and c"
            parts = parts[:-1] + tail
        if len(parts) == 2 and parts[1].rstrip(".") in _REGIONS:  # "Edinburgh, Scotland" is one place
            return gold
    else:
        parts = [p.strip() for p in _PAIR.split(gold) if p.strip()]
        if any(len(p.split()) > 1 for p in parts):
            return gold
    if (len(parts) < 2 or _YES_NO.match(gold) or " - " in gold or any(_PAIR.search(p) for p in parts)
            or any(len(p.split()) > 4 or re.search(r"\d", p) or p.count('"') % 2 or _LEANS.match(p) for p in parts)
            or (len(parts[0].split()) > 1 and all(len(p.split()) == 1 for p in parts[1:]))):
        return gold
    either = bool(re.search(r"\bor\b|或", gold))
    sep, last = ("、", "或" if either else "和") if _ZH.search(gold) else (", ", " or " if either else " and ")
    rev = parts[::-1]
    return sep.join(rev[:-1]) + last + rev[-1]


def _titled(gold: str, at: int) -> bool:
    """Whether the number at `at` belongs to a name or a title ("Xenoblade 2", "Game 7")."""
    before = [w.strip("\"'“(") for w in gold[:at].split()]
    return bool(before) and before[-1][:1].isupper() and before[-1] not in _MONTHS


def _reword(gold: str) -> str:
    """The gold reworded by a rule that keeps its meaning (another date format, a number in words or digits,
    a list in another order, yes or no said in full); the gold itself where no rule applies."""
    out = re.sub(r"\b(\d{1,2}) (" + "|".join(_MONTHS) + r"),? ((?:19|20)\d{2})\b", r"\2 \1, \3", gold)
    if out == gold:
        out = re.sub(r"\b(" + "|".join(_MONTHS) + r") (\d{1,2}),? ((?:19|20)\d{2})\b", r"\2 \1 \3", gold)
    if out == gold:
        out = re.sub(r"(?<![\d.,`'-])\b(\d|1[0-2])\b(?![\d.,:`'-])(?!\s+(?:" + "|".join(_MONTHS) + "))",
                     lambda m: m.group(0) if _titled(gold, m.start()) else _NUMBER_WORDS[int(m.group(0))], gold)
    if out == gold:
        out = re.sub(r"\b(" + "|".join(_NUMBER_WORDS[2:]) + r")\b(?!-)",  # not "one": often a pronoun
                     lambda m: str(_NUMBER_WORDS.index(m.group(0).lower())), gold, flags=re.I)
    if out == gold:
        out = re.sub(r"(?<!\d)([1-9])(?=[个次年月天岁只本])", lambda m: _ZH_NUMERALS[int(m.group(1))], gold)
    if out == gold:
        out = _reorder_list(gold)
    if out == gold and (m := _YES_NO.match(gold)) is not None and not m.group(1) and not gold[m.end():].strip(" ,.;"):
        out = "Yes, that's right" if m.group(2).lower() == "yes" else "No, that's not the case"
    return out


_KIND_OF = re.compile(r"^\s*(?:what|which)\s+(kind|type|sort)s?\s+of\s+([a-z-]+(?:\s+[a-z-]+)?)\s+"
                      r"(?:did|does|do|is|was|has|have|are|were|can|would|could)\b", re.I)
_WHAT_NOUN = re.compile(r"^\s*(?:what|which)\s+([a-z-]+)\s+(?:did|does|do|is|was|has|have|are|were|can|would)\b", re.I)


def _topical(question: str) -> str | None:
    """A vague answer on the question's own topic, naming nothing specific: "What kind of art does she make?" ->
    "some kind of art"; "Which book is he reading?" -> "a certain book"."""
    if (m := _KIND_OF.match(question)) is not None:
        return f"some {m.group(1).lower()} of {m.group(2).lower()}"
    if (m := _WHAT_NOUN.match(question)) is not None and m.group(1).lower() not in {"is", "was", "did", "does"}:
        noun = m.group(1).lower()
        plural = (noun.endswith("s") and not noun.endswith("ss")) or noun in {"people", "children", "men", "women"}
        return f"some {noun}" if plural else f"a certain {noun}"
    return None


_MONTH_ANY = re.compile("|".join(_MONTHS), re.I)  # "3June, 2022" too


def _vague_date(gold: str) -> str | None:
    """A date gold's year alone, where the gold says more (a month or a day): "7 May 2023" -> "sometime in 2023",
    the audit's vague-but-topical kind; "a while ago" for a bare year, which the year would repeat and "last
    year" could match (2022 asked in 2023); none without a year."""
    years = {m.group(0) for m in _YEAR.finditer(gold)}
    if len(years) == 1 and (_MONTH_ANY.search(gold) or _DAY.search(gold)):
        return f"sometime in {years.pop()}"
    return "a while ago" if years else None


def probes(item: QAItem, gold: str) -> dict[str, str]:
    """The probe answers of a question, from its gold (`gold_text`) and what its question asks for,
    deterministic per question: `vague` (the asked kind, no specifics; none where the gold is itself vague),
    `wrong` (the asked value changed) and `paraphrase` (the gold reworded by a meaning-keeping rule, framed as
    a reply; none where no rule applies: a verbatim copy tests nothing)."""
    key = f"{item.qid}|{item.question}|{gold}"
    text = gold.strip().rstrip("。.")
    zh = bool(_ZH.search(text))
    kind = answer_type(text, item.question)
    out = {}
    vague = (None if zh else _topical(item.question) if kind == "other" else _vague_date(text) if kind == "date"
             else None) or _pick((_VAGUE_ZH if zh else _VAGUE)[kind], key)
    if not any(v.lower() in text.lower() for options in (_VAGUE_ZH if zh else _VAGUE).values() for v in options):
        out["vague"] = vague
    out["wrong"] = _wrong(text, kind, key, item.question)
    if (reworded := _reword(text)) != text:
        out["paraphrase"] = f"我记得是{reworded}。" if zh else f"As far as I remember, {reworded}."
    return out


def row_fields(verdicts: dict[str, float | None]) -> dict[str, float]:
    """A row's probe fields from the judge's verdicts (1 correct, 0 wrong, None unclear: no field)."""
    out = {}
    for kind, v in verdicts.items():
        if v is not None:
            out[FIELDS[kind]] = float(v == 0.0) if kind == "paraphrase" else float(v == 1.0)
    return out


def flags(metrics: dict[str, float]) -> list[str]:
    """What a report should say of a cell's judge."""
    rate = metrics.get("judge_accepts_vague")
    if rate is not None and rate > VAGUE_LIMIT:
        return [f"the judge accepted {rate:.0%} of vague-but-wrong answers (over {VAGUE_LIMIT:.0%}): its score "
                "rewards on-topic answers with no specifics"]
    return []


def judge_notes(cells: list[tuple[str, dict[str, float]]]) -> list[str]:
    """A line per cell whose judge its probes flag, for the run's notes and `dkilab report`."""
    return [f"judge of {name}: {flag}" for name, metrics in cells for flag in flags(metrics)]
