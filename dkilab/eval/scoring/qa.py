"""Answer-quality scores.

LoCoMo's official QA scoring (task_eval/evaluation.py of the LoCoMo repository), reproduced exactly:
normalise (drop commas, lower-case, drop punctuation, drop the words a/an/the/and, squeeze spaces),
Porter-stem the tokens, token F1. Category 2-4: F1 (category 3 gold cut at the first ';');
category 1: prediction and gold split on ',' and each gold part takes its best F1 against the
prediction parts, averaged; category 5: 1 iff the prediction contains "no information available"
or "not mentioned". Exact match = equal sets of normalised tokens. Articles are stripped with the
`regex` package, as the official code does: Python's `re` disagrees with it on `\b` next to
combining marks (decomposed accents).

Scorers (registered, chosen by the dataset's declaration): `locomo`, `f1`, `zh_f1`, `choice`, and
`auto` (multiple choice if the question has choices, Chinese F1 for a Chinese gold, else F1).
A scorer maps (question, prediction, abstained) to {score, ...}; on an unanswerable question the
score is 1 for an abstention (LoCoMo category 5 keeps its official rule).
"""
from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

import regex

from dkilab.eval.scoring.base import scorer
from dkilab.text.lang import detect_language
from dkilab.text.segment import _jieba
from dkilab.types import QAItem

_ARTICLES = regex.compile(r"\b(a|an|the|and)\b")
_PUNCT = set(string.punctuation)


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def normalize_answer(s: str) -> str:
    s = str(s).replace(",", "")
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _stems(text: str) -> list[str]:
    ps = _stemmer()
    return [ps.stem(w) for w in normalize_answer(text).split()]


def _token_f1(pred: list[str], gold: list[str]) -> float:
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, ground_truth: str) -> float:
    return _token_f1(_stems(prediction), _stems(ground_truth))


def f1_multi(prediction: str, ground_truth: str) -> float:
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(ground_truth).split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


def exact_match(prediction: str, ground_truth: str) -> bool:
    return set(normalize_answer(prediction).split()) == set(normalize_answer(ground_truth).split())


def locomo_score(prediction: str, answer: str | None, category: int) -> float:
    """The official per-question score for LoCoMo category 1-5."""
    category = int(category)
    if category == 5:
        low = str(prediction).lower()
        return 1.0 if ("no information available" in low or "not mentioned" in low) else 0.0
    answer = str(answer)
    if category == 3:
        answer = answer.split(";")[0].strip()
    if category == 1:
        return f1_multi(prediction, answer)
    if category in (2, 3, 4):
        return f1_score(prediction, answer)
    raise ValueError(f"LoCoMo category must be 1-5, got {category}")


# --- Chinese ---------------------------------------------------------------------------------
_ZH_PUNCT = set("，。！？、；：“”‘’（）《》【】…—·「」『』") | _PUNCT


def zh_tokens(text: str) -> list[str]:
    """jieba tokens, lower-cased, without punctuation and spaces."""
    return [t.lower() for t in _jieba().lcut(str(text)) if t.strip() and not all(c in _ZH_PUNCT for c in t)]


def zh_f1(prediction: str, ground_truth: str) -> float:
    return _token_f1(zh_tokens(prediction), zh_tokens(ground_truth))


def zh_exact_match(prediction: str, ground_truth: str) -> bool:
    return set(zh_tokens(prediction)) == set(zh_tokens(ground_truth))


# --- multiple choice -------------------------------------------------------------------------
_CHOICE = re.compile(r"(?<![A-Za-z])([A-H])(?![A-Za-z])")


def pick_choice(prediction: str, choices: dict[str, str]) -> str | None:
    """The letter a prediction picks: an explicit letter first, else the one choice text it contains."""
    text = str(prediction).strip()
    m = _CHOICE.search(text[:40])
    if m and m.group(1) in choices:
        return m.group(1)
    contained = [k for k, v in choices.items() if v and str(v).strip() and str(v).strip() in text]
    return contained[0] if len(contained) == 1 else None


def choice_accuracy(prediction: str, answer: str, choices: dict[str, str]) -> float:
    return 1.0 if pick_choice(prediction, choices) == str(answer).strip() else 0.0


# --- scorers ----------------------------------------------------------------------------------
def _unanswerable(abstained: bool) -> dict[str, float]:
    return {"score": float(abstained)}


def _token_scorer(f1_fn, em_fn):
    def score(item: QAItem, prediction: str, abstained: bool) -> dict[str, float]:
        if not item.answerable:
            return _unanswerable(abstained)
        f1 = f1_fn(prediction, str(item.answer))
        return {"score": f1, "f1": f1, "em": float(em_fn(prediction, str(item.answer)))}

    return score


score_f1 = scorer("f1", description="token F1 with LoCoMo's normalisation and Porter stems")(
    _token_scorer(f1_score, exact_match))
score_zh_f1 = scorer("zh_f1", description="token F1 over jieba tokens")(_token_scorer(zh_f1, zh_exact_match))


@scorer("choice", description="multiple-choice accuracy (the picked letter, or the one choice text quoted)")
def score_choice(item: QAItem, prediction: str, abstained: bool) -> dict[str, float]:
    if not item.answerable:
        return _unanswerable(abstained)
    if not item.choices:
        return score_auto(item, prediction, abstained)
    acc = choice_accuracy(prediction, item.answer or "", item.choices)
    return {"score": acc, "accuracy": acc}


@scorer("locomo", description="LoCoMo's official per-category QA scoring (task_eval/evaluation.py)")
def score_locomo(item: QAItem, prediction: str, abstained: bool) -> dict[str, float]:
    try:
        category = int(item.category)  # type: ignore[arg-type]  # None or a name: the except below
    except (TypeError, ValueError):
        return score_auto(item, prediction, abstained)
    if category == 5 or not item.answerable:
        return {"score": locomo_score(prediction, None, 5)} if category == 5 else _unanswerable(abstained)
    gold = str(item.answer)
    return {"score": locomo_score(prediction, gold, category), "f1": f1_score(prediction, gold),
            "em": float(exact_match(prediction, gold))}


@scorer("auto", description="choice for multiple choice, zh_f1 for a Chinese gold answer, else f1")
def score_auto(item: QAItem, prediction: str, abstained: bool) -> dict[str, float]:
    if item.choices and item.answerable:
        return score_choice(item, prediction, abstained)
    if item.answerable and detect_language(str(item.answer)) == "cn":
        return score_zh_f1(item, prediction, abstained)
    return score_f1(item, prediction, abstained)
