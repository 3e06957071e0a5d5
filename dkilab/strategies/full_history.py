"""full_history: the whole history as text, oldest messages dropped first until it fits the budget."""
from __future__ import annotations

from dkilab import tracing
from dkilab.strategies.base import (
    Strategy,
    all_messages,
    history_block,
    language_of,
    newest_that_fit,
    preferences_text,
    question_text,
    register,
)
from dkilab.types import Answer


@register
class FullHistory(Strategy):
    name = "full_history"
    version = "2"  # matched history budget, one history renderer

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang = language_of(question)
        with stages("recall"):
            messages = all_messages(memory)
            tracing.record(documents=tracing.documents(messages[-tracing.MAX_DOCUMENTS:]), messages=len(messages))
        with stages("assembly"):
            head = preferences_text(preferences, lang)
            budget = self.budget(model, question, lang, head)
            # oldest dropped first
            kept, budget.used = newest_that_fit(messages, model, budget.history, lang, self.fields)
            history = history_block(kept, lang, self.fields)
            user_text = question_text(question, lang, head + history)
        with stages("generation"):
            gen, prompt = self.generate(model, user_text, lang)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, generated_tokens=gen.new_tokens,
                      recalled_ids=[m.message_id for m in kept], context_text=head + history, prompt=prompt,
                      budget=budget, metadata={"dropped_oldest": len(messages) - len(kept)})
