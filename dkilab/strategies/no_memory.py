"""no_memory: the question alone — the floor every memory strategy must beat."""
from __future__ import annotations

from dkilab.strategies.base import Strategy, language_of, question_text, register
from dkilab.types import Answer


@register
class NoMemory(Strategy):
    name = "no_memory"

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang = language_of(question)
        with stages("generation"):
            gen, prompt = self.generate(model, question_text(question, lang), lang)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, generated_tokens=gen.new_tokens, prompt=prompt)
