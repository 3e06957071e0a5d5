"""SuffixBuilder (seed recall-v4 §2.3-2.4): per-message threshold -> summary with trace id or
verbatim message, stop at the token budget, then history list + constraint + query."""
from __future__ import annotations

import hashlib

from dkilab.recall.config import RecallConfig
from dkilab.recall.formatters import PromptFormatter
from dkilab.text.lang import detect_language
from dkilab.text.tokens import TokenCounter
from dkilab.types import AssembledSuffix, HistoryItem, Message

FOLLOW_UP_TOKENS = 32  # the follow-up line a fact round appends


def fact_call_reserve(config: RecallConfig, max_new_tokens: int = 0) -> dict[str, int]:
    """The room recall_v4 keeps free beside its history (`ContextBudget.room`; taken from the history
    budget under `reserve_from_history`), so its history plus what the fact loop appends never overflows
    the window: when fact calls are on, the fact segments
    (`max_fact_tokens` plus a follow-up line per round) and the constraint instruction
    (`budget.instruction_reserve`). With the seed's `budget.generation_reserve` set, the fact part is
    that reserve beyond max_new_tokens (the seed's §2.3 formula) instead."""
    if not (config.enabled and config.fact_calls_active):
        return {}
    b, fc = config.budget, config.fact_call
    facts = (max(0, b.generation_reserve - max_new_tokens) if b.generation_reserve is not None
             else fc.max_fact_tokens + FOLLOW_UP_TOKENS * fc.max_rounds)
    return {k: v for k, v in (("fact_calls", facts), ("constraint", b.instruction_reserve)) if v}


SEPARATOR_TOKENS = 1  # the blank line that joins two items


class SuffixBuilder:
    def __init__(self, config: RecallConfig, formatter: PromptFormatter, summarizer, token_counter: TokenCounter):
        self.config, self.formatter, self.summarizer, self.counter = config, formatter, summarizer, token_counter
        # (content digest, max tokens) -> summary, reused across questions; keyed by the text itself, so
        # one builder serves any user or store without handing one user's summary to another
        self._summaries: dict[tuple[str, int], str] = {}

    def build_items(self, messages: list[Message], context_budget: int, summarize: bool = True,
                    language: str | None = None) -> tuple[list[HistoryItem], int, int]:
        """(items, used_tokens, dropped): walk the list in order and stop at the first overflow (§2.3).
        An item costs what it takes in the prompt as the formatter renders it (role, trace id and
        [SUMMARY] tags included, plus the blank line between items), so the budget bounds the prompt."""
        s = self.config.summary
        items: list[HistoryItem] = []
        used = 0
        for n, msg in enumerate(messages):
            tokens = self.counter.count_tokens(msg.content)
            if summarize and tokens > s.per_message_threshold:
                key = (hashlib.sha256(msg.content.encode()).hexdigest(), s.max_tokens_per_summary)
                if key not in self._summaries:
                    self._summaries[key] = self.summarizer.summarize(msg.content, max_tokens=s.max_tokens_per_summary)
                text = self._summaries[key]
                item = HistoryItem("summary", text, msg.message_id, msg.role, self.counter.count_tokens(text), "medium",
                                   msg.timestamp, msg.speaker)
            else:
                item = HistoryItem("message", msg.content, msg.message_id, msg.role, tokens, "high", msg.timestamp,
                                   msg.speaker)
            cost = self.counter.count_tokens(self._render(item, language)) + SEPARATOR_TOKENS
            if used + cost > context_budget:
                return items, used, len(messages) - n
            items.append(item)
            used += cost
        return items, used, 0

    def _render(self, item: HistoryItem, language: str | None) -> str:
        return (self.formatter.format_summary_item(item, language) if item.type == "summary"
                else self.formatter.format_message_item(item, language))

    def build(self, query: str, recalled_messages: list[Message], context_budget: int,
              summarize: bool | None = None, language: str | None = None) -> AssembledSuffix:
        """Assemble the suffix. Items are chosen in recall order (priority) and shown in time order."""
        if summarize is None:
            summarize = self.config.strategy == "summary_with_fact_call"
        lang = language or self.formatter.language or detect_language(query)
        items, used, dropped = self.build_items(recalled_messages, context_budget, summarize, lang)
        shown = sorted(items, key=lambda it: (it.timestamp is None, it.timestamp))
        parts = [self._render(it, lang) for it in shown]
        summaries = [it.trace_id for it in shown if it.type == "summary"]
        instruct = bool(summaries) and self.config.fact_calls_active
        if instruct:
            parts.append(self.formatter.format_constraint_instruction(summaries, lang))
        parts.append(self.formatter.format_query(query, lang))
        text = "\n\n".join(p for p in parts if p)
        return AssembledSuffix(
            text=text, items=shown, total_tokens=self.counter.count_tokens(text),
            message_count=sum(1 for it in shown if it.type == "message"), summary_count=len(summaries),
            has_fact_call_instruction=instruct, trace_ids=[it.trace_id for it in shown], history_tokens=used,
            dropped_for_budget=dropped, history_text="\n\n".join(p for p in parts[:len(shown)] if p))
