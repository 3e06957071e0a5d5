"""ChatGLM's tool calls and observations (seed §4.5: glm/chatglm -> GLM)."""
from __future__ import annotations

import json

from dkilab.recall.formatters.base import FORMATTERS, PromptFormatter
from dkilab.types import FactRequest, FactResponse


@FORMATTERS.register("glm")
class GLMFormatter(PromptFormatter):
    """ChatGLM `<|tool_call|>` calls and `<|observation|>` results; GLM-4's bare `name\n{json}` call
    (no marker) parses too."""

    name = "glm"
    matches = ("glm",)
    CALL, OBSERVATION = "<|tool_call|>", "<|observation|>"

    def format_fact_call(self, request: FactRequest, language: str | None = None) -> str:
        args = json.dumps({"trace_id": request.trace_id, "offset": request.offset, "limit": request.limit},
                          ensure_ascii=False)
        return f"{self.CALL}retrieve_fact\n{args}"

    def format_tool_call(self, name: str, args: dict) -> str:
        return f"{self.CALL}{name}\n{json.dumps(args, ensure_ascii=False, default=str)}"

    def format_fact_segment(self, response: FactResponse, language: str | None = None) -> str:
        return f"{self.OBSERVATION}\n" + super().format_fact_segment(response, language)

    def detect_fact_request(self, model_output: str) -> FactRequest | None:
        text = (model_output or "").split(self.OBSERVATION)[0]
        found = self._parse_native(text)
        if found is False:
            found = self._parse_text_call(text)
        return None if found is False else found
