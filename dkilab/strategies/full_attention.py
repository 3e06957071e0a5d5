"""full_attention (research strategy of seed §10): preferences and the recalled/recent history are
both injected as K/V (each block with its own alpha); only the question is visible text.

The history block holds the multi-signal recall result (recent turns first, then by relevance),
cut to `history_tokens` and shown in time order; it is encoded per question (cached when the same
history comes back, e.g. the recent turns of one session).
"""
from __future__ import annotations

from pydantic import Field, field_validator

from dkilab.recall import MultiSignalRecall, RecallConfig, create_reference_resolver, validate_recall_config
from dkilab.strategies.base import (Strategy, StrategyParams, history_block, language_of, preferences_text,
                                    question_text, register)
from dkilab.types import Answer


class FullAttentionParams(StrategyParams):
    preference_alpha: float = Field(0.4, ge=0.0)
    history_alpha: float = Field(1.0, ge=0.0)
    history_tokens: int = Field(512, ge=16)  # K/V budget for the history block
    recall: RecallConfig = Field(default_factory=RecallConfig)
    max_results: int = Field(50, ge=1, le=1000)

    @field_validator("recall", mode="before")
    @classmethod
    def _recall_block(cls, v):
        return v if isinstance(v, RecallConfig) else validate_recall_config(v, source="full_attention.recall")


@register
class FullAttention(Strategy):
    name = "full_attention"
    Params = FullAttentionParams
    uses_kv = True

    def __init__(self, params=None, source: str = "<params>"):
        super().__init__(params, source)
        self._resolver = create_reference_resolver()

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        self.require_kv(model, "the history")
        lang, p = language_of(question), self.params
        with stages("recall"):
            store = getattr(memory, "_store", None)
            msr = MultiSignalRecall(p.recall, self._resolver, memory, getattr(store, "embedder", None))
            recalled = msr.recall(question, session_id=session_id, max_results=p.max_results).messages
        with stages("assembly"):
            chosen, used = [], 0
            for m in recalled:  # priority order, within the K/V budget
                cost = model.count_tokens(m.content) + 12  # + date and speaker
                if used + cost > p.history_tokens:
                    break
                chosen.append(m)
                used += cost
            chosen.sort(key=lambda m: (m.timestamp, m.turn_id))
            history = history_block(chosen, lang)
            pref = preferences_text(preferences, lang)
            memories = []
            if pref:
                memories.append((self.memory_kv(model, pref), p.preference_alpha))
            if history:
                memories.append((self.memory_kv(model, history + "\n"), p.history_alpha))
        with stages("generation"):
            gen, prompt = self.generate(model, question_text(question, lang), lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in chosen],
                      context_text="\n".join(x for x in (pref, history) if x), prompt=prompt)
