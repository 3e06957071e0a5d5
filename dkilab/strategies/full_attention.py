"""full_attention (research strategy of seed §10): preferences and the recalled/recent history are
both injected as K/V (each block with its own alpha); only the question is visible text.

The history block holds the multi-signal recall result (recent turns first, then by relevance),
taken in that order within the matched history budget (`history_budget`, the same figure the text
strategies fill) and shown in time order, with the same history lines as every other strategy; it is
encoded per question (cached when the same history comes back, e.g. the recent turns of one session).
"""
from __future__ import annotations

from pydantic import Field

from dkilab.strategies.base import (
    RecallingStrategy,
    RecallParams,
    first_that_fit,
    history_block,
    language_of,
    preferences_text,
    question_text,
    register,
)
from dkilab.types import Answer


class FullAttentionParams(RecallParams):
    preference_alpha: float = Field(0.4, ge=0.0)
    history_alpha: float = Field(1.0, ge=0.0)


@register
class FullAttention(RecallingStrategy):
    name = "full_attention"
    version = "2"  # matched history budget, one history renderer
    Params = FullAttentionParams
    params: FullAttentionParams
    uses_kv = True

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        out = super().inert_params(has_preferences, generate)
        if not generate:
            out["history_alpha"] = "model.generate is false: alpha scales attention, not the context"
        return out

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        self.require_kv(model, "the history")
        lang, p = language_of(question), self.params
        with stages("recall"):
            recalled = self.recall_messages(question, memory, session_id, asked_at)
        with stages("assembly"):
            pref_text = preferences_text(preferences, lang)
            budget = self.budget(model, question, lang, pref_text)
            chosen, budget.used = first_that_fit(recalled, model, budget.history, lang, self.fields)
            history = history_block(chosen, lang, self.fields)
            memories, pref = self.preference_memories(model, preferences, lang, p.preference_alpha)
            if history:
                memories.append((self.memory_kv(model, history + "\n"), p.history_alpha))
        with stages("generation"):
            gen, prompt = self.generate(model, question_text(question, lang), lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in chosen],
                      context_text="\n".join(x for x in (pref, history) if x), prompt=prompt, budget=budget)
