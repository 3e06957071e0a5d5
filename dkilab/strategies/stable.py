"""stable (the seed's "现有 Stable"): preferences as K/V at negative positions (alpha 0.4) and the
last N turns as a flat text suffix (the newest of them that fit the history budget)."""
from __future__ import annotations

from pydantic import Field

from dkilab import tracing
from dkilab.strategies.base import (
    Strategy,
    StrategyParams,
    history_block,
    language_of,
    newest_that_fit,
    question_text,
    register,
)
from dkilab.types import Answer


class StableParams(StrategyParams):
    preference_alpha: float = Field(0.4, ge=0.0)
    recent_turns: int = Field(5, ge=0, le=200)  # a turn = a user message + the reply


@register
class Stable(Strategy):
    name = "stable"
    version = "2"  # matched history budget, one history renderer
    Params = StableParams
    params: StableParams
    uses_kv = True

    def needs_kv(self, preferences: bool = True) -> bool:
        return preferences  # only the preferences go in as K/V

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang = language_of(question)
        p = self.params
        with stages("recall"):
            recent = memory.recent(2 * p.recent_turns, session_id=session_id) if p.recent_turns else []
            tracing.record(documents=tracing.documents(recent))
        with stages("assembly"):
            memories, pref = self.preference_memories(model, preferences, lang, p.preference_alpha)
            budget = self.budget(model, question, lang, pref)
            recent, budget.used = newest_that_fit(recent, model, budget.history, lang, self.fields)
            history = history_block(recent, lang, self.fields)
            user_text = question_text(question, lang, history)
        with stages("generation"):
            gen, prompt = self.generate(model, user_text, lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in recent],
                      context_text="\n".join(x for x in (pref, history) if x), prompt=prompt, budget=budget)
