"""An OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, a judge) behind the ChatModel
interface, through the `openai` SDK: it retries 429 / 5xx / dropped connections with exponential
backoff (honouring Retry-After) up to `max_retries`, and gives up after `timeout` seconds per try.

`concurrency` is how many requests the harness keeps in flight (the runner answers that many
questions at once; `generate_batch` does the same for a list of prompts). Text in, text out: there is
no K/V access, so K/V strategies refuse this model with a clear error. Native tool calls returned by
the server (`tool_calls`) come back as `<tool_call>{json}</tool_call>` text, the Hermes syntax the
fact-call parser reads.
"""
from __future__ import annotations

import hashlib
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dkilab.config import ConfigError
from dkilab.models.specs import MODELS
from dkilab.models.text_only import TextOnlyModel
from dkilab.tracing import traced_generation
from dkilab.types import Generation


class EndpointError(RuntimeError):
    """The server could not be reached, timed out, or answered an error after every retry."""


VOLATILE = ("created",)  # vLLM stamps /models entries with the time of the request
_SERVED: dict[tuple[str, str], tuple[str | None, float]] = {}
RETRY_DOWN_S = 60.0  # a server that did not answer is asked again after this long, not on every cell's identity


def served_models(base_url: str, timeout: float = 5.0) -> list[dict]:
    """The entries of the server's `GET <base_url>/models` (raises what urllib raises when it does not answer)."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout) as r:
        return [m for m in json.loads(r.read()).get("data") or [] if isinstance(m, dict)]


def served_revision(base_url: str, name: str, timeout: float = 5.0) -> str | None:
    """What the server says it serves under `name` (its `/models` entry: id, root path, revision,
    max_model_len, owner, less the request time), as a digest: a server restarted on other weights
    under the same name is another model. None when it does not answer or does not list `name` (the
    run then fails on it with its own error). Remembered per process (a None for RETRY_DOWN_S)."""
    key = (base_url.rstrip("/"), name)
    got = _SERVED.get(key)
    if got is not None and (got[0] is not None or time.monotonic() - got[1] < RETRY_DOWN_S):
        return got[0]
    try:
        entry = next((m for m in served_models(key[0], timeout) if m.get("id") == name), None)
    except Exception:  # noqa: BLE001 - down or not OpenAI-compatible: nothing to record
        entry = None
    card = None if entry is None else {k: v for k, v in entry.items() if k not in VOLATILE}
    digest = None if card is None else hashlib.sha1(json.dumps(card, sort_keys=True,
                                                               default=str).encode()).hexdigest()[:16]
    _SERVED[key] = (digest, time.monotonic())
    return digest


def _api_messages(messages: list[dict]) -> list[dict]:
    """Our turns in the OpenAI wire format (tool-call arguments as JSON strings)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])
                                                  if not isinstance(c["function"]["arguments"], str)
                                                  else c["function"]["arguments"]}} for c in m["tool_calls"]]
        out.append(m)
    return out


class OpenAIChatModel(TextOnlyModel):
    def __init__(self, base_url: str, model: str, api_key: str | None = None, max_context: int | None = None,
                 timeout: float = 120.0, max_retries: int = 4, concurrency: int = 4, tokenizer: str | None = None):
        from openai import OpenAI

        if concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ValueError(f"concurrency >= 1, max_retries >= 0 and timeout > 0 expected, got "
                             f"{concurrency}, {max_retries}, {timeout}")
        self.base_url, self.model_name, self.timeout = base_url.rstrip("/"), model, timeout
        self.max_retries, self.concurrency = max_retries, concurrency
        super().__init__(f"openai:{model}@{self.base_url}", max_context, tokenizer)
        self._client = OpenAI(base_url=self.base_url, api_key=api_key or "not-needed", timeout=timeout,
                              max_retries=max_retries)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_name!r}, base_url={self.base_url!r})"

    @traced_generation
    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation:
        import openai

        self.refuse_memories(memories)
        messages = ([{"role": "user", "content": messages_or_prompt}] if isinstance(messages_or_prompt, str)
                    else _api_messages(messages_or_prompt))
        kw: dict[str, Any] = {k: v for k, v in (("stop", stop), ("seed", seed), ("tools", tools)) if v}
        try:
            resp = self._client.chat.completions.create(
                messages=messages,  # type: ignore[arg-type]
                model=self.model_name, max_tokens=max_new_tokens, temperature=temperature, **kw)
        except openai.APITimeoutError as e:
            raise EndpointError(f"{self.base_url}: no answer within {self.timeout:g} s "
                                f"({self.max_retries + 1} tries)") from e
        except openai.APIConnectionError as e:
            raise EndpointError(f"cannot reach {self.base_url} after {self.max_retries + 1} tries: {e}") from e
        except openai.APIStatusError as e:
            raise EndpointError(f"{self.base_url}/chat/completions answered {e.status_code} after "
                                f"{self.max_retries + 1} tries: {str(e.message)[:300]}") from e
        try:
            msg = resp.choices[0].message
        except (IndexError, AttributeError, TypeError) as e:
            raise EndpointError(f"{self.base_url} returned no choices[0].message: {str(resp)[:300]}") from e
        text = msg.content or ""
        for call in msg.tool_calls or []:
            fn = getattr(call, "function", None)  # a custom (non-function) tool call has none
            if fn is None:
                continue
            try:
                args = json.loads(fn.arguments or "{}")
            except json.JSONDecodeError:
                args = fn.arguments  # left as a string: the parser counts it as malformed
            text += f'<tool_call>{json.dumps({"name": fn.name, "arguments": args}, ensure_ascii=False)}</tool_call>'
        if not text.strip():  # a 200 with `content: null` (or empty) and no tool call is no answer
            raise EndpointError(f"{self.base_url} answered with empty content and no tool call "
                                f"(finish_reason {getattr(resp.choices[0], 'finish_reason', None)!r})")
        usage = resp.usage
        prompt_tokens = (usage.prompt_tokens if usage else None) or self.count_tokens(self.render(messages))
        new = (usage.completion_tokens if usage else None) or self.count_tokens(text)
        return Generation(text.strip(), int(prompt_tokens), int(new))

    def generate_batch(self, prompts: list, max_new_tokens: int = 64, **kw) -> list[Generation]:
        """`concurrency` requests in flight; results in the order of `prompts`."""
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda p: self.generate_full(p, max_new_tokens, **kw), prompts))


@MODELS.register("openai")
def _load_openai(spec: str, *, max_context: int | None = None, api_key: str | None = None, concurrency: int = 4,
                 max_retries: int = 4, timeout: float = 120.0, tokenizer: str | None = None, **_):
    name, _sep, base_url = spec[len("openai:"):].partition("@")
    if not name or not base_url:
        raise ConfigError(f"model spec {spec!r}: expected openai:<model>@<base_url>")
    return OpenAIChatModel(base_url, name, api_key=api_key, max_context=max_context, concurrency=concurrency,
                           max_retries=max_retries, timeout=timeout, tokenizer=tokenizer)
