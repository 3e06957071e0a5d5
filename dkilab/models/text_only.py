"""What models without local weights share (an OpenAI-compatible endpoint, a scripted model): no K/V
access; token counts from the served model's tokenizer when one is named (loaded locally: a hub id, a
local directory, or `$DKILAB_MODEL_ROOT/<id>`), else an offline estimate; the prompt rendered with that
tokenizer's chat template, else as plain `role: content` lines."""
from __future__ import annotations

import json

from dkilab.models.specs import ModelNotAvailableError, resolve_spec
from dkilab.text.tokens import HeuristicTokenCounter
from dkilab.types import Generation


class TextOnlyModel:
    supports_kv = False

    def __init__(self, name: str, max_context: int | None = None, tokenizer: str | None = None):
        self.name = name
        self.context_window = int(max_context or 8192)
        self._counter = HeuristicTokenCounter()
        self.tokenizer = self.tokenizer_name = None
        if tokenizer:
            self.tokenizer, self.tokenizer_name = _load_tokenizer(tokenizer), tokenizer

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise TypeError(f"{self!r} has no tokenizer (set model.tokenizer to the served model's)")
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, text: str) -> int:
        """The served model's tokens when its tokenizer is known, else an offline estimate."""
        if self.tokenizer is not None:
            return len(self.encode(text)) if text else 0
        return self._counter.count_tokens(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        if self.tokenizer is not None:
            ids = self.encode(text)
            return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])
        return self._counter.truncate(text, max_tokens)

    def render(self, messages_or_prompt, tools: list[dict] | None = None) -> str:
        if isinstance(messages_or_prompt, str):
            return messages_or_prompt
        if self.tokenizer is not None and getattr(self.tokenizer, "chat_template", None):
            kw = {"tools": tools} if tools else {}
            return self.tokenizer.apply_chat_template(messages_or_prompt, tokenize=False, add_generation_prompt=True,
                                                      **kw)
        lines = [f"{m['role']}: {m['content']}" for m in messages_or_prompt]
        return "\n".join(([f"tools: {json.dumps(tools, ensure_ascii=False)}"] if tools else []) + lines)

    def refuse_memories(self, memories) -> None:
        if memories:
            raise TypeError(f"{self!r} cannot take K/V memories: it only returns text")

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None,
                 tools: list[dict] | None = None) -> str:
        return self.generate_full(messages_or_prompt, max_new_tokens, temperature, stop, memories, seed, tools).text

    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation:
        """The generation with its token counts: each text-only model (endpoint, script) defines it."""
        raise NotImplementedError(f"{type(self).__name__} does not generate")


def _load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_spec(name))
    except OSError as e:
        raise ModelNotAvailableError(f"model.tokenizer {name!r}: cannot load it ({e}); give a local directory, "
                                     "a hub id in the cache, or $DKILAB_MODEL_ROOT/<id>") from e
