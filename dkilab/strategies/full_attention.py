"""full_attention (research strategy of seed §10): preferences and the recalled/recent history are
both injected as K/V (each block with its own alpha); only the question is visible text.

The history block holds the multi-signal recall result (recent turns first, then by relevance),
cut to `history_tokens` and shown in time order; it is encoded per question (cached when the same
history comes back, e.g. the recent turns of one session).
"""
from __future__ import annotations

from pydantic import Field

from dkilab.strategies.base import (RecallingStrategy, RecallParams, history_block, history_line, language_of,
                                    preferences_text, question_text, register)
from dkilab.types import Answer


class FullAttentionParams(RecallParams):
    preference_alpha: float = Field(0.4, ge=0.0)
    history_alpha: float = Field(1.0, ge=0.0)
    history_tokens: int = Field(512, ge=16)  # K/V budget for the history block


@register
class FullAttention(RecallingStrategy):
    name = "full_attention"
    Params = FullAttentionParams
    uses_kv = True

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        self.require_kv(model, "the history")
        lang, p = language_of(question), self.params
        with stages("recall"):
            recalled = self.recall_messages(question, memory, session_id)
        with stages("assembly"):
            pref_text = preferences_text(preferences, lang)
            budget = self.budget(model, question, lang, pref_text, cap=p.history_tokens)
            chosen, used = [], 0
            for m in recalled:  # priority order, within the K/V budget
                cost = model.count_tokens(history_line(m, lang)) + 1
                if used + cost > budget.history:
                    break
                chosen.append(m)
                used += cost
            chosen.sort(key=lambda m: (m.timestamp, m.turn_id))
            history = history_block(chosen, lang)
            memories, pref = self.preference_memories(model, preferences, lang, p.preference_alpha)
            if history:
                memories.append((self.memory_kv(model, history + "\n"), p.history_alpha))
        with stages("generation"):
            gen, prompt = self.generate(model, question_text(question, lang), lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in chosen],
                      context_text="\n".join(x for x in (pref, history) if x), prompt=prompt, budget=budget)
