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
- Llama 3.1 custom:          <function=name>{...}</function>
- XML invoke:                <invoke name="name"><parameter name="k">v</parameter></invoke>
- functionary:               >>>name\n{...}   or   <|recipient|>name\n<|content|>{...}
- ReAct:                     Action: name\nAction Input: {...}
- fenced JSON:               ```json\n{"name": ..., "arguments": {...}}\n```  (any fence, an offered name)
- named with JSON:           "... the name tool with {...}" (a tool's name, then its arguments object)
- Gemma:                     ```tool_code\nname(k=v)\n```: a Python-style call, which the text protocol reads
  (`formatters._parse_text_call`); `has_call` names every shape, truncated ones included.

One table (`PARSERS`), tried in order: the first syntax present decides.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

# markers a decoder must not strip (some are special tokens); the parser looks for them
MARKERS = ("<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "<|tool_call|>",
           "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
           "<｜tool▁calls▁end｜>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
DS_CALL, DS_SEP, DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    syntax: str  # the PARSERS entry that read it: hermes, llama, mistral, glm, deepseek, react, ...


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


def _deepseek(text: str, names) -> list[ToolCall] | None:
    if DS_CALL not in text:
        return None
    calls = []
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


def _mistral(text: str, names) -> list[ToolCall] | None:
    if "[TOOL_CALLS]" not in text:
        return None
    rest = text.split("[TOOL_CALLS]", 1)[1]
    if "[ARGS]" in rest:
        calls = []
        for part in text.split("[TOOL_CALLS]")[1:]:
            name, _, body = part.partition("[ARGS]")
            calls.append(ToolCall(name.strip(), _args(_json_at(body)[0]), "mistral"))
        return calls
    value, _ = _json_at(rest)
    return [_from_object(o, "mistral") for o in (value if isinstance(value, list) else [value])]


def _hermes(text: str, names) -> list[ToolCall] | None:
    """Hermes / Qwen, or GLM-4.5 (name + <arg_key> pairs)."""
    if "<tool_call>" not in text:
        return None
    calls = []
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


def _llama_tag(text: str, names) -> list[ToolCall] | None:
    """Llama 3.1 (one JSON object, or several separated by ';')."""
    if "<|python_tag|>" not in text:
        return None
    body, pos = text.split("<|python_tag|>", 1)[1], 0
    calls: list[ToolCall] = []
    while True:
        try:
            value, pos = _json_at(body, pos)
        except MalformedToolCall:
            if calls:
                return calls
            raise
        calls.append(_from_object(value, "llama"))


def _llama_function(text: str, names) -> list[ToolCall] | None:
    """Llama 3.1's custom-tool format `<function=name>{...}</function>`."""
    found = re.findall(r"<function=([\w.\-]+)>(.*?)(?:</function>|$)", text, re.S)
    return [ToolCall(name, _args(_json_at(body)[0]), "llama-function") for name, body in found] or None


def _invoke(text: str, names) -> list[ToolCall] | None:
    """`<invoke name="...">` with `<parameter name="k">v</parameter>` children (optionally in <function_calls>)."""
    found = re.findall(r"<invoke\s+name=[\"']([^\"']+)[\"']\s*>(.*?)(?:</invoke>|$)", text, re.S)
    if not found:
        return None
    calls = []
    for name, body in found:
        params = re.findall(r"<parameter\s+name=[\"']([^\"']+)[\"']\s*>(.*?)</parameter>", body, re.S)
        if not params and body.strip():
            raise MalformedToolCall(f"an <invoke> call without readable <parameter>s: {body[:80]!r}")
        calls.append(ToolCall(name.strip(), {k.strip(): _scalar(v) for k, v in params}, "invoke"))
    return calls


def _functionary(text: str, names) -> list[ToolCall] | None:
    """functionary: `>>>name\n{...}` (v3) or `<|recipient|>name\n<|content|>{...}` (v2); `all` is plain text."""
    found = re.findall(r"(?:^|\n)\s*>>>\s*([\w.\-]+)\s*\n(.*?)(?=\n\s*>>>|$)", text, re.S)
    found += re.findall(r"<\|recipient\|>\s*([\w.\-]+)\s*\n\s*<\|content\|>(.*?)(?=<\|from\|>|<\|recipient\|>|$)",
                        text, re.S)
    calls = [ToolCall(name, _args(_json_at(body)[0]), "functionary") for name, body in found if name != "all"]
    return calls or None


def _react(text: str, names) -> list[ToolCall] | None:
    """ReAct: `Action: name` then `Action Input: {...}` (JSON, or `k=v` / `k: v` pairs)."""
    found = re.findall(r"Action\s*:\s*`?([\w.\-]+)`?\s*\n+\s*Action\s+Input\s*:\s*(.*?)(?=\n\s*(?:Observation|Thought|"
                       r"Action)\s*:|$)", text, re.S | re.I)
    found = [(n, b) for n, b in found if n in names]
    if not found:
        return None
    calls = []
    for name, body in found:
        body = body.strip().strip("`")
        if body.lstrip().startswith(("{", "json")):
            calls.append(ToolCall(name, _args(_json_at(body)[0]), "react"))
        else:
            pairs = re.findall(r"(\w+)\s*[=:]\s*(\"[^\"]*\"|'[^']*'|[^,\n]+)", body)
            if not pairs:
                raise MalformedToolCall(f"a ReAct action input that is neither JSON nor k=v pairs: {body[:80]!r}")
            calls.append(ToolCall(name, {k: _scalar(v.strip().strip("\"'")) for k, v in pairs}, "react"))
    return calls


def _fenced_json(text: str, names) -> list[ToolCall] | None:
    """A fenced block holding `{"name": <an offered tool>, "arguments"|"parameters": {...}}`."""
    calls = []
    for body in re.findall(r"```[\w\-]*\s*\n?(\{.*?\})\s*```", text, re.S):
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and (value.get("name") or (value.get("function") or {}).get("name")) in names:
            calls.append(_from_object(value, "fenced-json"))
    return calls or None


def _named_with_json(text: str, names) -> list[ToolCall] | None:
    """A tool's name, then (within a few words on its line) its arguments as a JSON object: "I will call the
    retrieve_fact tool with {"trace_id": ...}" (the native constraint line's own wording, echoed)."""
    for name in names:
        m = re.search(rf"\b{re.escape(name)}\b[^\n{{(]{{0,40}}\{{", text)
        if m:
            value = _json_at(text, m.end() - 1)[0]
            if isinstance(value, dict) and isinstance(value.get("name"), str):
                return [_from_object(value, "named-json")]
            return [ToolCall(name, _args(value), "named-json")]
    return None


def _glm_bare(text: str, names) -> list[ToolCall] | None:
    """GLM-4: `name\n{json}`, after <|tool_call|> or bare."""
    if "<|tool_call|>" in text:
        name, _, body = text.split("<|tool_call|>", 1)[1].strip().partition("\n")
        return [ToolCall(name.strip(), _args(_json_at(body)[0]), "glm")]
    for name in names:
        m = re.match(rf"\s*{re.escape(name)}\s*\n\s*\{{", text)
        if m:
            return [ToolCall(name, _args(_json_at(text, m.end() - 1)[0]), "glm")]
    return None


def _bare_json(text: str, names) -> list[ToolCall] | None:
    """Llama's bare JSON object `{"name": <an offered tool>, "parameters": {...}}`."""
    stripped = text.strip()
    if not (stripped.startswith("{") and '"name"' in stripped):
        return None
    try:
        value, _ = _json_at(stripped)
    except MalformedToolCall:
        return None
    return [_from_object(value, "llama")] if isinstance(value, dict) and value.get("name") in names else None


def _scalar(value: str):
    value = value.strip()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


# the first syntax present decides: explicit markers first, then the shapes that need an offered tool's name
PARSERS: tuple[tuple[str, Callable[[str, tuple], list[ToolCall] | None]], ...] = (
    ("deepseek", _deepseek), ("mistral", _mistral), ("hermes", _hermes), ("llama", _llama_tag),
    ("llama-function", _llama_function), ("invoke", _invoke), ("functionary", _functionary), ("react", _react),
    ("glm", _glm_bare), ("fenced-json", _fenced_json), ("named-json", _named_with_json), ("bare-json", _bare_json),
)


def parse_tool_calls(text: str, names=("retrieve_fact",)) -> list[ToolCall]:
    """Every tool call in `text`, in order, in whichever syntax of `PARSERS` it is written. Raises
    MalformedToolCall when a syntax is present but its call cannot be read. `names` are the tools offered;
    the shapes without a marker (bare GLM-4, ReAct, fenced or bare JSON, a name then JSON) need one of them."""
    text = text or ""
    for _, parse in PARSERS:
        calls = parse(text, tuple(names))
        if calls is not None:
            return calls
    return []


# how a call starts, in every syntax above and the text protocol: a reply that is (a cut-off piece of) one of
# these is a call, not an answer
CALL_OPENERS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "<|tool_call|>", DS_CALL, "<｜tool▁calls▁begin｜>",
                "<function=", "<invoke", "<function_calls>", ">>>", "<|recipient|>", "Action:", "```tool_code")


def has_call(text: str, names=("retrieve_fact",)) -> bool:
    """Whether a model's final text is (or holds) a tool call rather than an answer: a call in any parsed
    syntax, a malformed one, a text-protocol `name(`, a tool's name with its arguments, or a call cut off by
    `max_new_tokens` (the reply is a prefix of a call's opening, e.g. `retrieve_`)."""
    text = (text or "").strip()
    if not text:
        return False
    try:
        if parse_tool_calls(text, names):
            return True
    except MalformedToolCall:
        return True
    if any(re.search(rf"\b{re.escape(n)}\s*\(", text) for n in names) or any(m in text for m in MARKERS):
        return True
    cut = re.match(r'[`\w\s]*\{\s*"(?:name|function)"\s*:\s*"(\w*)"?', text)  # a JSON call cut off
    if cut and any(n.startswith(cut.group(1)) for n in names):
        return True
    bare = text.lstrip("`{[<\"' ")  # a cut-off opener, or an opener whose call never came
    return len(bare) >= 4 and any(o.startswith((text, bare)) or text.startswith(o) for o in (*CALL_OPENERS, *names))


def template_supports_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a `tools` list (Qwen2.5/3, Llama 3.1+, Mistral,
    GLM-4, DeepSeek templates do; SmolLM2's does not)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default") or ""
    return isinstance(template, str) and "tools" in template
