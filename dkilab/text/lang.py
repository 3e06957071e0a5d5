"""Language detection shared by the resolver, keywords and the store."""
from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def cjk_share(text: str) -> float:
    """Share of CJK ideographs among the non-space characters of `text`."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(1 for c in chars if _CJK.match(c)) / len(chars)


def detect_language(text: str, threshold: float = 0.3) -> str:
    """'cn' when CJK characters make up more than `threshold` of the text, else 'en' (seed §3.7)."""
    return "cn" if cjk_share(text) > threshold else "en"


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))
