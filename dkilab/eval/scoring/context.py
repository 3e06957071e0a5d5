"""What a strategy put in front of the model, measured without a model answering: context-only cells
(`model: {generate: false}`) and answered cells alike (`kind="context"`).

- `evidence_visible`: share of a question's gold evidence messages the model sees word for word (in the
  visible prompt or a K/V block; a message shown only as a summary does not count);
- `evidence_reachable`: ... verbatim, or behind a summary whose trace id the model was offered a
  `retrieve_fact` call for (one fact call away);
- `answer_in_context`: the gold answer string appears in what the model was given (short gold answers
  only: up to 6 words, or 12 Chinese characters; a multiple-choice answer by its option text);
- `history_tokens`, `budget_use`: what the history filled, and its share of the matched budget.
"""
from __future__ import annotations

import re

from dkilab.eval.scoring.base import Scored, metric
from dkilab.eval.scoring.qa import normalize_answer
from dkilab.text.lang import detect_language

MAX_WORDS, MAX_ZH_CHARS = 6, 12
_ZH_STRIP = re.compile(r"[\s，。！？、；：“”‘’（）《》【】…—·「」『』,.!?;:\"'()\[\]]")


def _gold(q: Scored) -> set[str]:
    return set(q.item.evidence_ids) if q.item.answerable else set()


@metric("evidence_visible", group="context",
        label="gold evidence seen verbatim (share)", rate=True, plot=5, kind="context",
        higher_is_better=True, subset="answerable", per_category=True, rank=21, headline=True,
        description="share of gold evidence messages the model sees word for word")
def _verbatim(q: Scored):
    gold = _gold(q)
    if not gold:
        return None
    seen = set(q.answer.recalled_ids) - set(q.answer.summary_ids)
    return len(gold & seen) / len(gold)


@metric("evidence_reachable", group="context", rate=True, narrow=("context",), kind="context", higher_is_better=True,
        subset="answerable", per_category=True, rank=22,
        description="share of gold evidence messages seen verbatim or one offered fact call away")
def _reachable(q: Scored):
    gold = _gold(q)
    if not gold:
        return None
    seen = set(q.answer.recalled_ids)
    if not q.answer.fact_calls_offered:
        seen -= set(q.answer.summary_ids)
    return len(gold & seen) / len(gold)


def gold_answer_text(item) -> str | None:
    """The gold answer as a string to look for, or None when it is too long to be a single mention."""
    if not item.answerable or item.answer is None:
        return None
    gold = str(item.choices.get(str(item.answer), item.answer)) if item.choices else str(item.answer)
    if detect_language(gold) == "cn":
        core = _ZH_STRIP.sub("", gold)
        return core if 0 < len(core) <= MAX_ZH_CHARS else None

    words = normalize_answer(gold).split()
    return " ".join(words) if 0 < len(words) <= MAX_WORDS else None


def answer_in_text(gold: str, context: str) -> bool:
    if detect_language(gold) == "cn":
        return gold in _ZH_STRIP.sub("", context)

    return f" {gold} " in f" {normalize_answer(context)} "


@metric("answer_in_context", group="context",
        rate=True, narrow=("context",), kind="context", higher_is_better=True, subset="answerable",
        per_category=True, rank=23, description="the (short) gold answer string appears in what the model was given")
def _answer_in_context(q: Scored):
    gold = gold_answer_text(q.item)
    return None if gold is None else float(answer_in_text(gold, q.answer.context_text))


@metric("history_tokens", group="context", narrow=("context",), kind="context", higher_is_better=None, rank=43,
        description="history tokens the strategy's selection filled (text lines or the K/V block)")
def _history_tokens(q: Scored):
    b = q.answer.budget
    return b.used if b is not None and b.used is not None else None


@metric("budget_use", group="context", kind="context", higher_is_better=None, rank=44,
        description="history tokens used / the matched history budget")
def _budget_use(q: Scored):
    b = q.answer.budget
    return b.used / b.total if b is not None and b.used is not None and b.total else None
