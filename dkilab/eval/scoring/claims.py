"""Unsupported claims: numbers, dates, names and nouns in an answer found nowhere in what the model
was given (the question, the prompt's memory text, K/V memory texts and facts)."""
from __future__ import annotations

import re

from dkilab.eval.scoring.base import Scored, metric
from dkilab.text.lang import has_cjk
from dkilab.text.segment import _jieba
from dkilab.text.stopwords import STOPWORDS

_NUM = re.compile(r"\d+(?:[.,:]\d+)*")
_NAME = re.compile(r"\b[A-Z][a-zA-Z'’-]+(?:\s+[A-Z][a-zA-Z'’-]+)*")
_ZH_NUM = re.compile(r"[零一二三四五六七八九十百千万两]+")
_ZH_NOUN_FLAGS = ("n", "nr", "ns", "nt", "nz", "m", "t", "eng")


def is_stopword(word: str) -> bool:
    return word in STOPWORDS


def claims(answer: str) -> list[str]:
    """The checkable pieces of an answer."""
    text = str(answer or "")
    out = _NUM.findall(text)
    if has_cjk(text):
        import jieba.posseg as pseg

        _jieba()  # quiet and initialised

        for w in pseg.lcut(text):
            if w.flag in _ZH_NOUN_FLAGS and len(w.word.strip()) >= 2 and not is_stopword(w.word):
                out.append(w.word.strip())
        out += [m for m in _ZH_NUM.findall(text) if len(m) >= 2]
    for m in _NAME.finditer(text):
        words = [w for w in m.group(0).split() if not is_stopword(w.lower())]
        if words and not (m.start() == 0 and len(words) == 1 and m.group(0) in ("Yes", "No", "The", "It", "I")):
            out.append(" ".join(words))
    seen, uniq = set(), []
    for c in out:
        if c.lower() not in seen and not is_stopword(c.lower()):
            seen.add(c.lower())
            uniq.append(c)
    return uniq


def unsupported_claims(answer: str, context: str) -> list[str]:
    ctx = str(context or "").lower().replace(",", "")
    return [c for c in claims(answer) if c.lower().replace(",", "") not in ctx]


def unsupported_rate(answer: str, context: str) -> float | None:
    """Share of an answer's claims not found in the context; None when it makes no checkable claim."""
    found = claims(answer)
    if not found:
        return None
    return len(unsupported_claims(answer, context)) / len(found)


@metric("unsupported_claim_rate", group="answers",
        label="unsupported claims (share, lower is better)", rate=True, plot=7,
        narrow=("answers",), higher_is_better=False, subset="answerable", rank=12,
        description="share of an answer's claims (numbers, dates, names, nouns) found nowhere in what the model was "
                    "given")
def _unsupported(q: Scored):
    if not q.item.answerable or q.imported:  # an imported reply: what its model was given is not known
        return None
    return unsupported_rate(q.answer.text, q.item.question + "\n" + q.answer.context_text)
