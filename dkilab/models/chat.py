"""TransformersChatModel: a local transformers causal LM behind one small interface the strategies use."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTEXT = 2048


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    new_tokens: int
    injected_tokens: int = 0


class TransformersChatModel:
    """`generate(messages_or_prompt, max_new_tokens, temperature=0, stop=None, memories=None)`.

    A `str` prompt is tokenised exactly as given; a list of `{"role", "content"}` dicts goes through
    the model's chat template with the generation prompt added. Decoding is greedy unless
    `temperature > 0`. `memories` are `(MemoryKV, alpha)` pairs injected as K/V (see `dkilab.models.kv`).
    """

    supports_kv = True

    def __init__(self, model, tokenizer, name: str, max_context: int | None = None):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        native = getattr(model.config, "max_position_embeddings", None) or DEFAULT_CONTEXT
        self.context_window = int(min(native, max_context) if max_context else native)
        eos = model.generation_config.eos_token_id if model.generation_config else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])

    def __repr__(self) -> str:
        return f"TransformersChatModel({self.name!r}, context_window={self.context_window})"

    # --- text <-> tokens -----------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.encode(text)
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])

    def render(self, messages_or_prompt) -> str:
        """The exact prompt text the model will see."""
        if isinstance(messages_or_prompt, str):
            return messages_or_prompt
        if not isinstance(messages_or_prompt, list) or not all(
                isinstance(m, dict) and {"role", "content"} <= m.keys() for m in messages_or_prompt):
            raise TypeError("generate expects a prompt string or a list of {'role', 'content'} dicts")
        return self.tokenizer.apply_chat_template(messages_or_prompt, tokenize=False, add_generation_prompt=True)

    # --- generation ----------------------------------------------------------------------
    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None) -> Generation:
        from dkilab.models.kv import decode

        prompt = self.render(messages_or_prompt)
        ids = self.encode(prompt)
        if len(ids) + max_new_tokens > self.context_window:
            raise ValueError(f"prompt of {len(ids)} tokens + {max_new_tokens} new tokens exceeds "
                             f"{self.name}'s context window of {self.context_window}")
        new, injected = decode(self, ids, memories, max_new_tokens, temperature, stop, seed)
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        for s in stop or []:
            if s in text:
                text = text[: text.index(s)]
        return Generation(text.strip(), len(ids), len(new), injected)

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None) -> str:
        return self.generate_full(messages_or_prompt, max_new_tokens, temperature, stop, memories, seed).text
