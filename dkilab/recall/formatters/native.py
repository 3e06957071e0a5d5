"""retrieve_fact as a native tool of the model's chat template."""
from __future__ import annotations

import json

from dkilab import prompts
from dkilab.recall.formatters.base import FORMATTERS, PromptFormatter, _lang
from dkilab.types import FactRequest


@FORMATTERS.register("native")
class NativeToolFormatter(PromptFormatter):
    """retrieve_fact offered as a native tool through the model's chat template (`tools=[...]`); the
    call is read in whichever family's syntax the model writes it (Hermes/Qwen, Llama, Mistral, GLM,
    DeepSeek), with the seed's text call as the fallback. Fact segments go back as `tool` messages."""

    name = "native"

    @property
    def tool(self) -> dict:
        """The retrieve_fact schema offered through the chat template (dkilab/prompts.py)."""
        return prompts.RETRIEVE_FACT_TOOL

    def format_fact_call(self, request: FactRequest, language: str | None = None) -> str:
        args = f'{{"trace_id": "{request.trace_id}", "limit": {request.limit}}}'
        return prompts.NATIVE_CALL[_lang(language or self.language)].format(args=args)

    def templates(self, language: str | None = None) -> dict[str, str]:
        return super().templates(language) | {"tool_schema": json.dumps(self.tool, ensure_ascii=False, sort_keys=True)}

    def detect_fact_request(self, model_output: str) -> FactRequest | None:
        text = model_output or ""
        found = self._parse_native(text)
        if found is False:
            found = self._parse_text_call(text)
        return None if found is False else found
