"""Optional spans around strategy stages, model calls and fact calls (MLflow tracing when the runner
turns it on), typed by MLflow's GenAI conventions.

Strategies call `span(name, **inputs)`; it does nothing unless `tracing_to(mlflow)` is active, so the
library never needs MLflow to answer a question. The span type follows the stage name (`SPAN_TYPES`:
recall = RETRIEVER, assembly = PARSER, generation = LLM, retrieve_fact and `tool.*` = TOOL, ...) unless
`span_type=` says otherwise. A RETRIEVER span whose outputs hold `documents` (see `documents()`) shows
them as MLflow documents (text, id, score, signals); its other outputs become `dkilab.*` attributes.
Models wrap each generation in `chat_span(...)`: a CHAT_MODEL span with the full prompt, the model name
and the token usage (`mlflow.chat.tokenUsage`), which MLflow sums into a trace's token usage.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
from typing import Any

from dkilab.types import Hit, MemoryBlock, RecalledMessage, ServedModel

_TRACER: contextvars.ContextVar[Any] = contextvars.ContextVar("dkilab_tracer", default=None)
_OUT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("dkilab_span_outputs", default=None)

SPAN_TYPES = {
    "recall": "RETRIEVER", "retrieval": "RETRIEVER", "assembly": "PARSER", "generation": "LLM", "answer": "LLM",
    "retrieve_fact": "TOOL", "rewrite": "CHAIN", "intent": "PARSER", "l2_read": "MEMORY", "l2_update": "MEMORY",
    "l1_write_query": "MEMORY", "l1_write_answer": "MEMORY", "recall_agent": "AGENT", "agent_step": "CHAIN",
    "agent_decide": "CHAIN", "semantic_pointer": "CHAIN",
}


MAX_DOCUMENTS = 100  # a retriever span shows at most this many documents (full_history: the newest)


def type_of(name: str) -> str:
    if name.startswith("tool."):
        return "TOOL"
    return SPAN_TYPES.get(name, "CHAIN")


def active() -> bool:
    return _TRACER.get() is not None


@contextlib.contextmanager
def tracing_to(mlflow_module):
    token = _TRACER.set(mlflow_module)
    try:
        yield
    finally:
        _TRACER.reset(token)


def _start(tracer, name: str, kind: str):
    try:
        return tracer.start_span(name=name, span_type=kind)
    except TypeError:  # a minimal tracer (tests) without span types
        return tracer.start_span(name=name)


def documents(items) -> list[dict[str, Any]]:
    """MLflow retriever documents from recalled messages: `Message`s, `(Message, score)` pairs or
    `RecalledMessage`s (score and per-signal scores)."""
    out = []
    for it in items:
        score, signals = None, None
        if isinstance(it, tuple):
            it, score = it
        elif isinstance(it, RecalledMessage):
            score, signals = it.score, dict(it.signals or {})
            it = it.message
        elif isinstance(it, Hit):
            score, it = it.score, it.message
        meta = {"role": it.role, "timestamp": str(it.timestamp), "session_id": it.session_id}
        if score is not None:
            meta["score"] = round(float(score), 4)
        if signals:
            meta["signals"] = {k: round(float(v), 4) for k, v in signals.items()}
            meta["signal"] = max(signals, key=lambda k: signals[k])
        out.append({"page_content": it.content, "metadata": meta, "id": it.message_id})
    return out


def record(**outputs) -> None:
    """Add outputs to the innermost open span (a no-op when tracing is off), e.g. a helper deep inside a
    recall stage adding its `documents`."""
    out = _OUT.get()
    if out is not None:
        out.update(outputs)


@contextlib.contextmanager
def span(name: str, outputs: dict | None = None, *, span_type: str | None = None, **inputs):
    """A span named `name`; yields a dict the caller may fill with outputs."""
    tracer = _TRACER.get()
    out: dict[str, Any] = dict(outputs or {})
    if tracer is None:
        yield out
        return
    kind = span_type or type_of(name)
    with _start(tracer, name, kind) as s:
        if inputs:
            s.set_inputs(inputs)
        token = _OUT.set(out)
        try:
            yield out
        finally:
            _OUT.reset(token)
            if kind == "RETRIEVER" and "documents" in out and hasattr(s, "set_attribute"):
                for k, v in out.items():
                    if k != "documents":
                        s.set_attribute(f"dkilab.{k}", v if isinstance(v, (str, int, float, bool)) else
                                        json.dumps(v, ensure_ascii=False, default=str))
                s.set_outputs(out["documents"])
            elif out:
                s.set_outputs(out)


@contextlib.contextmanager
def chat_span(model_name: str, prompt, **params):
    """One model call as a CHAT_MODEL span; yields `record(text, prompt_tokens, new_tokens, injected=0)`."""
    tracer = _TRACER.get()
    if tracer is None:
        yield lambda *a, **k: None
        return
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    with _start(tracer, f"chat {model_name}".strip(), "CHAT_MODEL") as s:
        s.set_inputs({"messages": messages, **({"raw_prompt": prompt} if isinstance(prompt, str) else {}), **params})
        if hasattr(s, "set_attribute"):
            s.set_attribute("mlflow.llm.model", model_name)

        def record(text: str, prompt_tokens: int, new_tokens: int, injected: int = 0) -> None:
            usage = {"input_tokens": int(prompt_tokens), "output_tokens": int(new_tokens),
                     "total_tokens": int(prompt_tokens) + int(new_tokens)}
            s.set_outputs({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                           "usage": usage, **({"injected_tokens": int(injected)} if injected else {})})
            if hasattr(s, "set_attribute"):
                s.set_attribute("mlflow.chat.tokenUsage", usage)

        yield record


def traced_generation(fn):
    """Decorator for a model's `generate_full(self, messages_or_prompt, max_new_tokens, ...)`: each call is
    a CHAT_MODEL span when tracing is on (nothing otherwise)."""
    @functools.wraps(fn)
    def wrapper(self, messages_or_prompt, max_new_tokens: int = 64, *args, **kw):
        if _TRACER.get() is None:
            return fn(self, messages_or_prompt, max_new_tokens, *args, **kw)
        name = self.model_name if isinstance(self, ServedModel) else self.name
        memories = kw.get("memories") if "memories" in kw else (args[2] if len(args) > 2 else None)
        extra = {"memories": [{"tokens": m.n_tokens, "alpha": a, "text": m.text[:500]} if isinstance(m, MemoryBlock)
                              else {"tokens": None, "alpha": a, "text": ""} for m, a in memories]} if memories else {}
        with chat_span(str(name), messages_or_prompt, max_new_tokens=max_new_tokens, **extra) as record:
            gen = fn(self, messages_or_prompt, max_new_tokens, *args, **kw)
            record(gen.text, gen.prompt_tokens, gen.new_tokens, gen.injected_tokens)
            return gen

    return wrapper
