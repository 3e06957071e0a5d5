"""An OpenAI-compatible chat endpoint (vLLM, llama.cpp server, a judge) behind the ChatModel interface.

Text in, text out: there is no K/V access, so K/V strategies refuse this model with a clear error.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from dkilab.models.chat import Generation
from dkilab.text.tokens import HeuristicTokenCounter


class OpenAIChatModel:
    supports_kv = False

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 max_context: int | None = None, timeout: float = 120.0):
        self.base_url, self.model_name, self.api_key, self.timeout = base_url.rstrip("/"), model, api_key, timeout
        self.name = f"openai:{model}@{self.base_url}"
        self.context_window = int(max_context or 8192)
        self._counter = HeuristicTokenCounter()

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_name!r}, base_url={self.base_url!r})"

    def count_tokens(self, text: str) -> int:
        """An offline estimate: the server's tokenizer is not available here."""
        return self._counter.count_tokens(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self._counter.truncate(text, max_tokens)

    def render(self, messages_or_prompt) -> str:
        if isinstance(messages_or_prompt, str):
            return messages_or_prompt
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages_or_prompt)

    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None) -> Generation:
        if memories:
            raise TypeError(f"{self!r} cannot take K/V memories: an OpenAI-compatible endpoint only returns text")
        messages = ([{"role": "user", "content": messages_or_prompt}] if isinstance(messages_or_prompt, str)
                    else list(messages_or_prompt))
        body = {"model": self.model_name, "messages": messages, "max_tokens": max_new_tokens,
                "temperature": temperature}
        if stop:
            body["stop"] = stop
        if seed is not None:
            body["seed"] = seed
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{self.base_url}/chat/completions answered {e.code}: {e.read()[:300]!r}") from e
        except urllib.error.URLError as e:
            raise RuntimeError(f"cannot reach {self.base_url}: {e.reason}") from e
        try:
            text = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as e:
            raise RuntimeError(f"{self.base_url} returned no choices[0].message.content: {str(data)[:300]}") from e
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens") or self.count_tokens(self.render(messages))
        return Generation(text.strip(), int(prompt_tokens), int(usage.get("completion_tokens") or self.count_tokens(text)))

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None) -> str:
        return self.generate_full(messages_or_prompt, max_new_tokens, temperature, stop, memories, seed).text
