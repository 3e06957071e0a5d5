"""Token counting (seed recall-v4 §5.1.1): the model's tokenizer when given, else an offline estimate.

The estimate needs no download: one token per CJK character, about 1.3 per English word, one per
punctuation mark. It is used only where no model tokenizer is available (e.g. retrieval-only runs).
"""
from __future__ import annotations

import math
import re
from typing import Any, Protocol, runtime_checkable

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[A-Za-z0-9]+")
_PUNCT = re.compile(r"[^\w\s]")


@runtime_checkable
class TokenCounter(Protocol):
    def count_tokens(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


class HeuristicTokenCounter:
    name = "heuristic"

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        cjk = len(_CJK.findall(text))
        words = _WORD.findall(text)
        word_tokens = sum(max(1, math.ceil(len(w) / 4)) if len(w) > 6 else 1 for w in words)
        punct = len(_PUNCT.findall(text))
        return cjk + math.ceil(word_tokens * 1.1) + punct

    def truncate(self, text: str, max_tokens: int) -> str:
        if self.count_tokens(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:  # longest prefix within the budget
            mid = (lo + hi + 1) // 2
            if self.count_tokens(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


class HFTokenCounter:
    """Counts with a transformers tokenizer (no special tokens)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.name = getattr(tokenizer, "name_or_path", "hf")

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])


def make_token_counter(tokenizer: Any = None) -> TokenCounter:
    """A counter for `tokenizer` (a transformers tokenizer, or a TokenCounter: a model), else the estimate."""
    if tokenizer is None:
        return HeuristicTokenCounter()
    if isinstance(tokenizer, TokenCounter):
        return tokenizer
    return HFTokenCounter(tokenizer)


def count_tokens(text: str, tokenizer: Any = None) -> int:
    return make_token_counter(tokenizer).count_tokens(text)
