"""The seed's plain-text call, for any model."""
from __future__ import annotations

from dkilab.recall.formatters.base import FORMATTERS, PromptFormatter
from dkilab.types import FactRequest


@FORMATTERS.register("generic")
class GenericFormatter(PromptFormatter):
    """Plain-text call `retrieve_fact(trace_id="...", offset=0, limit=5)`; works with any model."""

    name = "generic"

    def format_fact_call(self, request: FactRequest, language: str | None = None) -> str:
        return f'retrieve_fact(trace_id="{request.trace_id}", offset={request.offset}, limit={request.limit})'

    def detect_fact_request(self, model_output: str) -> FactRequest | None:
        text = model_output or ""
        found = self._parse_native(text)  # a tool-trained model may answer in its own syntax anyway
        if found is False:
            found = self._parse_text_call(text)
        return None if found is False else found
