"""Optional spans around strategy stages and fact calls (MLflow tracing when the runner turns it on).

Strategies call `span(name, **inputs)`; it does nothing unless `tracing_to(mlflow)` is active, so
the library never needs MLflow to answer a question.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any

_TRACER: contextvars.ContextVar[Any] = contextvars.ContextVar("dkilab_tracer", default=None)


@contextlib.contextmanager
def tracing_to(mlflow_module):
    token = _TRACER.set(mlflow_module)
    try:
        yield
    finally:
        _TRACER.reset(token)


@contextlib.contextmanager
def span(name: str, outputs: dict | None = None, **inputs):
    """A span named `name`; yields a dict the caller may fill with outputs."""
    tracer = _TRACER.get()
    out: dict[str, Any] = dict(outputs or {})
    if tracer is None:
        yield out
        return
    with tracer.start_span(name=name) as s:
        if inputs:
            s.set_inputs(inputs)
        try:
            yield out
        finally:
            if out:
                s.set_outputs(out)
