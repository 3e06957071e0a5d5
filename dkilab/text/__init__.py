"""Text utilities: language detection, segmentation, keywords, token counting, summarisers."""
from dkilab.text.keywords import extract_keywords
from dkilab.text.lang import cjk_share, detect_language, has_cjk
from dkilab.text.segment import content_tokens, segment
from dkilab.text.stopwords import STOPWORDS
from dkilab.text.summarize import ExtractiveSummarizer, LLMSummarizer, salient_details, split_sentences
from dkilab.text.tokens import HeuristicTokenCounter, HFTokenCounter, count_tokens, make_token_counter

__all__ = ["cjk_share", "detect_language", "has_cjk", "segment", "content_tokens", "STOPWORDS", "extract_keywords",
           "ExtractiveSummarizer", "LLMSummarizer", "salient_details", "split_sentences", "HeuristicTokenCounter",
           "HFTokenCounter", "count_tokens", "make_token_counter"]
