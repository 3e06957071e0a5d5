"""What models without local weights share (an OpenAI-compatible endpoint, a scripted model): no K/V
access, an offline token estimate (their tokenizer is not here), a plain rendering of the messages."""
from __future__ import annotations

import json

from dkilab.text.tokens import HeuristicTokenCounter


class TextOnlyModel:
    supports_kv = False

    def __init__(self, name: str, max_context: int | None = None):
        self.name = name
        self.context_window = int(max_context or 8192)
        self._counter = HeuristicTokenCounter()

    def count_tokens(self, text: str) -> int:
        """An offline estimate: the model's own tokenizer is not available here."""
        return self._counter.count_tokens(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self._counter.truncate(text, max_tokens)

    def render(self, messages_or_prompt, tools: list[dict] | None = None) -> str:
        if isinstance(messages_or_prompt, str):
            return messages_or_prompt
        lines = [f"{m['role']}: {m['content']}" for m in messages_or_prompt]
        return "\n".join(([f"tools: {json.dumps(tools, ensure_ascii=False)}"] if tools else []) + lines)

    def refuse_memories(self, memories) -> None:
        if memories:
            raise TypeError(f"{self!r} cannot take K/V memories: it only returns text")

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None,
                 tools: list[dict] | None = None) -> str:
        return self.generate_full(messages_or_prompt, max_new_tokens, temperature, stop, memories, seed, tools).text
