"""Summarisers for long messages (seed recall-v4 §5.2): extractive (jieba TextRank) and LLM.

A summary is a navigation sign, not a fact: the extractive summary keeps whole original sentences
and ends with an explicit "may be missing" line naming the numbers, dates and names it dropped, so
the model knows when to call retrieve_fact for the original.
"""
from __future__ import annotations

import re
from typing import Callable

from dkilab.prompts import LLM_SUMMARY_PROMPT  # prompt texts: dkilab/prompts.py
from dkilab.text.lang import detect_language
from dkilab.text.segment import _jieba, segment
from dkilab.text.stopwords import STOPWORDS
from dkilab.text.tokens import HeuristicTokenCounter, TokenCounter
from dkilab.types import Generation

# sentence ends: Chinese and full-width marks, English .!? followed by space, and newlines
_SPLIT = re.compile(r"(?<=[。！？；!?])|(?<=[.;])(?=\s)|\n+")
_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_DATE = re.compile(
    rf"\d{{4}}[-/年]\d{{1,2}}(?:[-/月]\d{{1,2}}日?)?|\d{{1,2}}月\d{{1,2}}[日号]?|\d{{1,2}}\s+{_MONTHS}(?:,?\s+\d{{4}})?"
    rf"|{_MONTHS}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?|(?:周|星期)[一二三四五六日天]"
    r"|\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b|\d{1,2}:\d{2}(?:\s*[ap]m)?|[上下]午\d{1,2}点"
    r"|[零一二三四五六七八九十]{1,3}点", re.I)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*%?|[一二三四五六七八九十百千万两]+(?:个|元|块|人|岁|次|天|年|公里|小时|分钟)")
_EN_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")
LABELS = {"cn": ("本摘要可能缺失", "数字", "日期/时间", "名称", "其他细节（省略 {n}/{m} 句）"),
          "en": ("May be missing", "numbers", "dates/times", "names", "other details ({n} of {m} sentences omitted)")}


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SPLIT.split(text) if s and s.strip()]


def salient_details(text: str) -> dict[str, list[str]]:
    """Numbers, dates/times and names found in `text` (what a summary must admit to dropping)."""
    dates = list(dict.fromkeys(m.group(0).strip() for m in _DATE.finditer(text)))
    rest = _DATE.sub(" ", text)
    numbers = list(dict.fromkeys(m.group(0) for m in _NUMBER.finditer(rest)))
    names = [m.group(0) for m in _EN_NAME.finditer(text) if m.group(0).lower() not in STOPWORDS]
    if detect_language(text) == "cn" or re.search(r"[\u4e00-\u9fff]", text):
        import jieba.posseg

        _jieba()
        names += [w for w, flag in jieba.posseg.lcut(text) if flag in ("nr", "ns", "nt", "nz") and len(w) > 1]
    return {"numbers": numbers, "dates": dates, "names": list(dict.fromkeys(names))}


class ExtractiveSummarizer:
    """Top TextRank-scored sentences in their original order, within `max_tokens`, plus a
    "may be missing: ..." line (seed §5.2.2)."""

    name = "extractive"

    def __init__(self, token_counter: TokenCounter | None = None, max_sentences: int = 5, keywords: int = 20):
        self.counter = token_counter or HeuristicTokenCounter()
        self.max_sentences, self.keywords = max_sentences, keywords

    def summarize(self, text: str, max_tokens: int = 150) -> str:
        language = detect_language(text)
        sentences = split_sentences(text)
        if not sentences:
            return self.counter.truncate(text, max_tokens)
        import jieba.analyse

        _jieba()
        weights = dict(jieba.analyse.textrank(text, topK=self.keywords, withWeight=True,
                                              allowPOS=("n", "nr", "ns", "nt", "nz", "v", "vn", "eng", "m")))
        scored = []
        for i, s in enumerate(sentences):
            toks = segment(s)
            score = sum(weights.get(t, 0.0) for t in toks) + 0.2 * len(salient_details(s)["numbers"])
            scored.append((score / (1 + len(toks)) ** 0.3, i))
        ranked = [i for _, i in sorted(scored, key=lambda x: (-x[0], x[1]))]
        chosen: list[int] = []
        used = 0
        for i in ranked:  # greedy by score within the budget
            if len(chosen) >= self.max_sentences:
                break
            cost = self.counter.count_tokens(sentences[i])
            if used + cost <= max_tokens:
                chosen.append(i)
                used += cost
        if not chosen:  # even the best sentence is too long: keep its head
            sentences[ranked[0]] = self.counter.truncate(sentences[ranked[0]], max(1, max_tokens * 2 // 3))
            chosen = [ranked[0]]
        joiner = "" if language == "cn" else " "
        per_kind = 4
        while True:  # drop the weakest kept sentence (then list fewer details) until the line fits too
            order = sorted(chosen)
            body = joiner.join(sentences[i] for i in order)
            dropped = [sentences[i] for i in range(len(sentences)) if i not in chosen]
            if not dropped:
                return body
            out = body + "\n" + self._missing_line(dropped, body, len(sentences), language, per_kind)
            if self.counter.count_tokens(out) <= max_tokens:
                return out
            if len(chosen) > 1:
                chosen.pop()
            elif per_kind > 1:
                per_kind -= 1
            else:  # the line must survive: shorten the one kept sentence instead
                line = self._missing_line(dropped, body, len(sentences), language, 1)
                room = max_tokens - self.counter.count_tokens(line) - 1
                head = self.counter.truncate(body, room) if room > 0 else ""
                return (head + "\n" + line) if head else self.counter.truncate(line, max_tokens)

    @staticmethod
    def _missing_line(dropped: list[str], kept: str, total: int, language: str, per_kind: int = 4) -> str:
        head, num_l, date_l, name_l, other_l = LABELS[language]
        details = salient_details(" ".join(dropped))
        kept_lower = kept.lower()
        parts = []
        for label, key in ((num_l, "numbers"), (date_l, "dates"), (name_l, "names")):
            lost = [x for x in details[key] if x.lower() not in kept_lower][:per_kind]
            if lost:
                parts.append(f"{label}({', '.join(lost)})" if language == "cn" else f"{label} ({', '.join(lost)})")
        if not parts:
            parts.append(other_l.format(n=len(dropped), m=total))
        sep = "、" if language == "cn" else "; "
        return f"{head}: {sep.join(parts)}"




class LLMSummarizer:
    """Abstractive summary through a `generate(prompt, max_new_tokens) -> str` callable (seed §5.2.3)."""

    name = "llm"

    def __init__(self, generate: Callable[..., str], token_counter: TokenCounter | None = None):
        self.generate = generate
        self.counter = token_counter or HeuristicTokenCounter()

    def summarize(self, text: str, max_tokens: int = 150) -> str:
        prompt = LLM_SUMMARY_PROMPT[detect_language(text)].format(max_tokens=max_tokens, text=text)
        out = self.generate(prompt, max_new_tokens=max_tokens)
        out = out.text if isinstance(out, Generation) else str(out)
        return self.counter.truncate(out.strip(), max_tokens)
