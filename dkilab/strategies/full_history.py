"""full_history: the whole history as text, oldest messages dropped first until the prompt fits."""
from __future__ import annotations

from dkilab.strategies.base import (Strategy, all_messages, history_line, language_of, preferences_text,
                                    question_text, register, HISTORY_HEAD)
from dkilab.types import Answer


@register
class FullHistory(Strategy):
    name = "full_history"

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang = language_of(question)
        with stages("recall"):
            messages = all_messages(memory)
        with stages("assembly"):
            head = preferences_text(preferences, lang)
            lines = [history_line(m, lang) for m in messages]
            fixed = model.count_tokens(question_text(question, lang, head + HISTORY_HEAD[lang])) + 64  # + template
            budget = self.window(model) - self.params.max_new_tokens - fixed
            keep, used = len(lines), 0
            for i in range(len(lines) - 1, -1, -1):  # newest first, until the budget is spent
                cost = model.count_tokens(lines[i]) + 1
                if used + cost > budget:
                    break
                used += cost
                keep = i
            kept = messages[keep:] if budget > 0 else []
            history = "\n".join([HISTORY_HEAD[lang], *lines[keep:]]) if kept else ""
            user_text = question_text(question, lang, head + history)
        with stages("generation"):
            gen, prompt = self.generate(model, user_text, lang)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, generated_tokens=gen.new_tokens,
                      recalled_ids=[m.message_id for m in kept], context_text=head + history, prompt=prompt,
                      metadata={"dropped_oldest": len(messages) - len(kept)})
