"""DeepSeek's tool-call tokens (seed §4.5: deepseek -> DeepSeek)."""
from __future__ import annotations

import json

from dkilab import prompts
from dkilab.models.tool_calls import DS_CALL, DS_END, DS_SEP
from dkilab.recall.formatters.base import FORMATTERS, PromptFormatter, _lang
from dkilab.types import FactRequest


@FORMATTERS.register("deepseek")
class DeepSeekFormatter(PromptFormatter):
    """DeepSeek tool-call tokens (the V3 shape: `function<｜tool▁sep｜>name` + fenced JSON; V3.1's
    `name<｜tool▁sep｜>{json}` and the older `name\n{json}` parse too); the tool is registered in the
    system prompt. Plain-text calls are accepted as well, since smaller checkpoints fall back to them."""

    name = "deepseek"
    matches = ("deepseek",)
    BEGIN, CALL, SEP, END, ENDS = "<｜tool▁calls▁begin｜>", DS_CALL, DS_SEP, DS_END, "<｜tool▁calls▁end｜>"

    def format_tool_call(self, name: str, args: dict) -> str:
        body = json.dumps(args, ensure_ascii=False, default=str)
        return f"{self.BEGIN}{self.CALL}function{self.SEP}{name}\n```json\n{body}\n```{self.END}{self.ENDS}"

    def format_fact_call(self, request: FactRequest, language: str | None = None) -> str:
        return self.format_tool_call("retrieve_fact", {"trace_id": request.trace_id, "offset": request.offset,
                                                       "limit": request.limit})

    def system_prompt(self, language: str | None = None) -> str:
        return prompts.DEEPSEEK_TOOLS[_lang(language or self.language)]

    def detect_fact_request(self, model_output: str) -> FactRequest | None:
        text = model_output or ""
        found = self._parse_native(text)  # its own tokens, or another family's syntax from a fine-tune
        if found is False:
            found = self._parse_text_call(text)
        return None if found is False else found
