"""Model-specific prompt formatters (seed recall-v4 §4.5), one module each, found by `FORMATTERS` (a new formatter is
a new file here, `@FORMATTERS.register("name")` on a `PromptFormatter` subclass; nothing else is edited). The shipped
ones are re-exported for their importers."""
from dkilab.recall.formatters.base import (
    FORMATTERS,
    MAX_CALL_ARGS,
    MAX_LIMIT,
    MAX_OFFSET,
    PromptFormatter,
    create_formatter,
    formatter_kind,
)
from dkilab.recall.formatters.deepseek import DeepSeekFormatter
from dkilab.recall.formatters.generic import GenericFormatter
from dkilab.recall.formatters.glm import GLMFormatter
from dkilab.recall.formatters.native import NativeToolFormatter

__all__ = ["FORMATTERS", "MAX_CALL_ARGS", "MAX_LIMIT", "MAX_OFFSET", "PromptFormatter", "create_formatter",
           "formatter_kind", "DeepSeekFormatter", "GenericFormatter", "GLMFormatter", "NativeToolFormatter"]
