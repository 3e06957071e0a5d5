"""Word segmentation for indexing and querying: jieba for Chinese runs, plain words for the rest."""
from __future__ import annotations

import logging
import re
import unicodedata
from functools import lru_cache

import jieba

from dkilab.text.stopwords import STOPWORDS

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# a run of CJK ideographs, a number with inner separators (3.5, 10:30), or a letter/digit word (u1, don't)
_TOKEN = re.compile(rf"[{_CJK}]+|[0-9]+(?:[.:][0-9]+)+|[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)?")
_CJK_RUN = re.compile(rf"[{_CJK}]+")


@lru_cache(maxsize=1)
def _jieba():
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def segment(text: str) -> list[str]:
    """Lower-cased tokens of NFKC-normalised `text` (fullwidth "Ａｐｐｌｅ" is "apple"); Chinese runs are
    cut by jieba (precise mode)."""
    tokens: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        tok = match.group(0)
        if _CJK_RUN.fullmatch(tok):
            tokens.extend(w for w in _jieba().lcut(tok) if w.strip())
        else:
            tokens.append(tok)
    return tokens


def content_tokens(text: str) -> list[str]:
    """`segment` without stopwords; falls back to all tokens if only stopwords remain."""
    tokens = segment(text)
    kept = [t for t in tokens if t not in STOPWORDS]
    return kept or tokens
