"""retrieve_fact as a native tool: its JSON schema for `apply_chat_template(..., tools=[...])`, and a
parser for the call syntaxes instruct models are trained to emit.

Families (written from each family's documented format; no template text is copied here):
- Hermes / Qwen2.5 / Qwen3:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>
- Llama 3.1+:                <|python_tag|>{"name": ..., "parameters": {...}}  or the bare JSON object
- Mistral:                   [TOOL_CALLS][{"name": ..., "arguments": {...}}]  or [TOOL_CALLS]name[ARGS]{...}
- GLM-4:                     name\n{...} (optionally after <|tool_call|>); GLM-4.5: <tool_call>name
                             <arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
- DeepSeek V3:               <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>
  DeepSeek V3.1:             <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

# markers a decoder must not strip (some are special tokens); the parser looks for them
MARKERS = ("<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "<|tool_call|>",
           "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
           "<｜tool▁calls▁end｜>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
DS_CALL, DS_SEP, DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    syntax: str  # hermes | llama | mistral | glm | deepseek


class MalformedToolCall(ValueError):
    """A tool-call marker is present but what follows cannot be parsed."""


def _json_at(text: str, start: int = 0):
    """The JSON value starting at the first '{' or '[' at/after `start` -> (value, end) or raises."""
    m = re.compile(r"[\[{]").search(text, start)
    if not m:
        raise MalformedToolCall(f"no JSON after the call marker: {text[start:start + 80]!r}")
    try:
        return json.JSONDecoder().raw_decode(text, m.start())
    except json.JSONDecodeError as e:
        raise MalformedToolCall(f"bad JSON in a tool call: {e}") from e


def _args(value) -> dict:
    if isinstance(value, str):  # some families send the arguments as a JSON string
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise MalformedToolCall(f"arguments are not JSON: {value[:80]!r}") from e
    if not isinstance(value, dict):
        raise MalformedToolCall(f"arguments must be an object, got {type(value).__name__}")
    return value


def _from_object(obj, syntax: str) -> ToolCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name") or (obj.get("function") or {}).get("name"), str):
        raise MalformedToolCall(f"a {syntax} tool call needs a name: {str(obj)[:80]}")
    if "function" in obj and isinstance(obj["function"], dict):
        obj = obj["function"]
    return ToolCall(obj["name"], _args(obj.get("arguments", obj.get("parameters", {}))), syntax)


def _glm45_args(body: str) -> dict:
    keys = re.findall(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", body, re.S)
    out = {}
    for k, v in keys:
        v = v.strip()
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def parse_tool_calls(text: str, names=("retrieve_fact",)) -> list[ToolCall]:
    """Every tool call in `text`, in order, in whichever family's syntax it is written. Raises
    MalformedToolCall when a marker is present but its call cannot be read. `names` are the tools
    offered; they let a bare GLM-4 `name\\n{json}` or a bare Llama JSON object be recognised."""
    text = text or ""
    calls: list[ToolCall] = []
    if DS_CALL in text:  # DeepSeek V3 / V3.1
        for chunk in text.split(DS_CALL)[1:]:
            chunk = chunk.split(DS_END)[0]
            if DS_SEP not in chunk:  # the older shape: name\n{...}
                name, _, body = chunk.strip().partition("\n")
                calls.append(ToolCall(name.strip(), _args(_json_at(body)[0]), "deepseek"))
                continue
            head, body = chunk.split(DS_SEP, 1)
            if head.strip() == "function":  # V3: function<sep>name\n```json\n{...}\n```
                name, _, body = body.partition("\n")
            else:  # V3.1: name<sep>{...}
                name = head
            calls.append(ToolCall(name.strip(), _args(_json_at(body)[0]), "deepseek"))
        return calls
    if "[TOOL_CALLS]" in text:  # Mistral
        rest = text.split("[TOOL_CALLS]", 1)[1]
        if "[ARGS]" in rest:
            for part in text.split("[TOOL_CALLS]")[1:]:
                name, _, body = part.partition("[ARGS]")
                calls.append(ToolCall(name.strip(), _args(_json_at(body)[0]), "mistral"))
            return calls
        value, _ = _json_at(rest)
        return [_from_object(o, "mistral") for o in (value if isinstance(value, list) else [value])]
    if "<tool_call>" in text:  # Hermes / Qwen, or GLM-4.5 (name + <arg_key> pairs)
        for chunk in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.S):
            if "<arg_key>" in chunk or not chunk.strip().startswith("{"):
                name, _, body = chunk.strip().partition("\n")
                if "<arg_key>" in chunk:
                    calls.append(ToolCall(name.split("<arg_key>")[0].strip(), _glm45_args(chunk), "glm"))
                else:
                    calls.append(ToolCall(name.strip(), _args(_json_at(body)[0]), "glm"))
            else:
                calls.append(_from_object(_json_at(chunk)[0], "hermes"))
        return calls
    if "<|python_tag|>" in text:  # Llama 3.1 (one JSON object, or several separated by ';')
        body = text.split("<|python_tag|>", 1)[1]
        pos = 0
        while True:
            try:
                value, pos = _json_at(body, pos)
            except MalformedToolCall:
                if calls:
                    return calls
                raise
            calls.append(_from_object(value, "llama"))
    if "<|tool_call|>" in text:  # GLM-4 (ChatGLM) marker before name\n{json}
        text = text.split("<|tool_call|>", 1)[1]
        name, _, body = text.strip().partition("\n")
        return [ToolCall(name.strip(), _args(_json_at(body)[0]), "glm")]
    for name in names:  # bare forms: GLM-4 `name\n{json}` and Llama's bare JSON object
        m = re.match(rf"\s*{re.escape(name)}\s*\n\s*\{{", text)
        if m:
            return [ToolCall(name, _args(_json_at(text, m.end() - 1)[0]), "glm")]
    stripped = text.strip()
    if stripped.startswith("{") and '"name"' in stripped:
        try:
            value, _ = _json_at(stripped)
        except MalformedToolCall:
            return []
        if isinstance(value, dict) and value.get("name") in names:
            return [_from_object(value, "llama")]
    return []


def template_supports_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a `tools` list (Qwen2.5/3, Llama 3.1+, Mistral,
    GLM-4, DeepSeek templates do; SmolLM2's does not)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default") or ""
    return isinstance(template, str) and "tools" in template
