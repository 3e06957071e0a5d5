"""Text utilities: language detection and segmentation (jieba for Chinese)."""
from dkilab.text.lang import cjk_share, detect_language, has_cjk
from dkilab.text.segment import content_tokens, segment
from dkilab.text.stopwords import STOPWORDS

__all__ = ["cjk_share", "detect_language", "has_cjk", "segment", "content_tokens", "STOPWORDS"]
