"""The judge's own errors, measured on every judged cell (`judge: {stress: true}`, the default): beside each judged
answer, three probes built by rule from the question's gold go to the same judge with the same prompt:
- **vague but wrong**: the gold's type with no specifics ("sometime last year", "a family member", "a few");
- **wrong specific**: the gold with its specifics changed (another year, month, weekday or number, another name),
  or a specific unrelated answer where the gold has none;
- **paraphrased correct**: the gold, whole, framed as a reply ("As far as I remember, 7 May 2023.").
A judge should reject the first two and accept the third. The cell reports the accept and reject rates with their
intervals beside its score (`judge_accepts_vague`, `judge_accepts_wrong`, `judge_rejects_paraphrase`), and a
judge accepting more than `VAGUE_LIMIT` of the vague answers is flagged (`flags`). The probes are built from
the gold alone, never from the answer under test.
"""
from __future__ import annotations

import hashlib
import re

from dkilab.eval.metrics.base import declare
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
_NUMBER = re.compile(r"\d+")
_ZH = re.compile(r"[\u4e00-\u9fff]")
_ZH_DATE = re.compile(r"\d+\s*[年月日号]|[上下这]个?(?:月|周|星期)|去年|今年|明年|昨天|前天|周[一二三四五六日天]|星期")
_NAME = re.compile(r"\b[A-Z][a-z]+\b")
_PERSON = re.compile(r"\b(mother|mom|father|dad|sister|brother|friend|wife|husband|son|daughter|aunt|uncle|"
                     r"grand\w+|cousin|colleague|boss|neighbou?r|partner|kids?|children)\b", re.I)
_OTHER_NAMES = ["Priya", "Tomasz", "Ingrid", "Kwame", "Lucia"]
_NOT_NAMES = {"no", "yes", "the", "a", "an", "i", "it", "he", "she", "they", "we", "my", "your", "his", "her", "their",
              "on", "in", "at", "to", "from", "and", "or", "not", "because", "when", "after", "before"}
_ZH_DAYS = "一二三四五六日"
_VAGUE = {"date": ("sometime last year", "a while ago"), "number": ("a few", "several"),
          "person": ("a family member", "someone they know"), "place": ("somewhere nearby", "a place they like"),
          "other": ("something related to their interests", "it had to do with their plans")}
_VAGUE_ZH = {"date": ("去年某个时候", "之前某一天"), "number": ("几个", "好几次"),
             "person": ("一位家人", "一个认识的人"), "place": ("附近某个地方",),
             "other": ("和兴趣有关的事情", "跟计划有关的东西")}


def answer_type(gold: str) -> str:
    """date, number, person, place or other: what kind of answer the gold is, by rule."""
    if _ZH.search(gold):
        if _ZH_DATE.search(gold):
            return "date"
        if re.fullmatch(r"\s*\d+\s*\S{0,2}\s*", gold):
            return "number"
        return "person" if re.search(r"妈|爸|姐|妹|哥|弟|朋友|同事|老板|邻居|孩子|儿子|女儿", gold) else "other"
    if (_YEAR.search(gold) or _MONTH.search(gold) or _DAY.search(gold)
            or re.search(r"\bago\b|\blast (week|month|year)\b", gold, re.I)):
        return "date"
    if re.fullmatch(r"\s*(about |around )?\d+(\.\d+)?\s*\w{0,10}\s*", gold, re.I):
        return "number"
    if _PERSON.search(gold) or (len(gold.split()) <= 3 and _NAME.fullmatch(gold.split()[0] if gold.split() else "")):
        return "person"
    if re.search(r"\b(in|at|to|from)\s+[A-Z]", gold):
        return "place"
    return "other"


def _pick(options, key: str) -> str:
    return options[int(hashlib.sha1(key.encode()).hexdigest(), 16) % len(options)]


def _wrong(gold: str, key: str) -> str:
    """The gold with its specifics changed; a specific unrelated answer where it has none."""
    changed = _YEAR.sub(lambda m: str(int(m.group(0)) - 3), gold)
    changed = _MONTH.sub(lambda m: _MONTHS[(next(i for i, x in enumerate(_MONTHS) if x.lower().startswith(
        m.group(0).lower()[:3])) + 5) % 12], changed)
    changed = _DAY.sub(
        lambda m: _DAYS[(next(i for i, x in enumerate(_DAYS) if x.lower() == m.group(0).lower()) + 3) % 7], changed)
    if changed == gold:
        changed = _NUMBER.sub(lambda m: str(int(m.group(0)) + 7), gold)
    if changed == gold:
        changed = re.sub(r"(周|星期)([一二三四五六日])", lambda m: m.group(1)
                         + _ZH_DAYS[(_ZH_DAYS.index(m.group(2)) + 3) % 7], gold)
    if changed == gold:
        names = [n for n in _NAME.findall(gold) if n.lower() not in _NOT_NAMES]
        if names:
            other = _pick([n for n in _OTHER_NAMES if n not in names], key)
            changed = re.sub(rf"\b{re.escape(names[0])}\b", other, gold)
    if changed == gold:
        changed = "一家在苏州新开的面包店" if _ZH.search(gold) else _pick(
            ["a pottery class in Denver", "the red bicycle from the flea market", "a trip to Lisbon in 2019"], key)
    return changed


def probes(item: QAItem, gold: str) -> dict[str, str]:
    """The three probe answers of a question, from its gold (`gold_text`), deterministic per question."""
    key = f"{item.qid}|{item.question}|{gold}"
    text = gold.strip().rstrip("。.")
    zh = bool(_ZH.search(text))
    kind = answer_type(text)
    vague = _pick((_VAGUE_ZH if zh else _VAGUE)[kind], key)
    paraphrase = f"我记得是{text}。" if zh else f"As far as I remember, {text}."
    return {"vague": vague, "wrong": _wrong(text, key), "paraphrase": paraphrase}


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
