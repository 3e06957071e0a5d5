"""retrieve_fact as a native tool: each family's call syntax (call strings written here from the
families' documented formats), the round trip through a tools-capable chat template of our own, and
decoding that keeps the markers a parser needs."""
import json
import os

import pytest
from dkilab.models.tool_calls import MalformedToolCall, has_call, parse_tool_calls, template_supports_tools
from dkilab.prompts import RETRIEVE_FACT_TOOL
from dkilab.recall.formatters import DeepSeekFormatter, GenericFormatter, GLMFormatter, NativeToolFormatter

ARGS = {"trace_id": "s1#3", "offset": 2, "limit": 4}
AUDIT = os.path.join(os.environ.get("DKILAB_DATA_DIR", "/nonexistent"), "locomo_audit")
J = json.dumps(ARGS)
CALLS = {
    "hermes/qwen": f'<tool_call>\n{{"name": "retrieve_fact", "arguments": {J}}}\n</tool_call>',
    "llama python_tag": f'<|python_tag|>{{"name": "retrieve_fact", "parameters": {J}}}<|eom_id|>',
    "llama bare json": f'{{"name": "retrieve_fact", "parameters": {J}}}',
    "llama type function": f'{{"type": "function", "name": "retrieve_fact", "parameters": {J}}}',
    "mistral list": f'[TOOL_CALLS][{{"name": "retrieve_fact", "arguments": {J}, "id": "abc123xyz"}}]',
    "mistral args": f"[TOOL_CALLS]retrieve_fact[ARGS]{J}",
    "glm4 bare": f"retrieve_fact\n{J}",
    "glm4 marker": f"<|tool_call|>retrieve_fact\n{J}",
    "glm4.5 arg pairs": ("<tool_call>retrieve_fact\n<arg_key>trace_id</arg_key>\n<arg_value>s1#3</arg_value>\n"
                         "<arg_key>offset</arg_key>\n<arg_value>2</arg_value>\n<arg_key>limit</arg_key>\n"
                         "<arg_value>4</arg_value>\n</tool_call>"),
    "deepseek v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>retrieve_fact\n```json\n"
                    f"{J}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "deepseek v3.1": f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>retrieve_fact<｜tool▁sep｜>{J}<｜tool▁call▁end｜><｜"
                     "tool▁calls▁end｜>",
    "hermes string arguments": f'<tool_call>{{"name": "retrieve_fact", "arguments": {json.dumps(J)}}}</tool_call>',
    # issue 84: the shapes real models and agent frameworks emit beside the chat-template ones
    "llama3.1 function tag": f"<function=retrieve_fact>{J}</function><|eom_id|>",
    "react json": f"Thought: the summary may hold it.\nAction: retrieve_fact\nAction Input: {J}\nObservation:",
    "react pairs": 'Thought: need it\nAction: `retrieve_fact`\nAction Input: trace_id="s1#3", offset=2, limit=4',
    "fenced json": f'Let me check.\n```json\n{{"name": "retrieve_fact", "arguments": {J}}}\n```',
    "fenced tool_call": f'```tool_call\n{{"name": "retrieve_fact", "parameters": {J}}}\n```',
    "functionary v3": f">>>retrieve_fact\n{J}",
    "functionary v2": f"<|from|>assistant\n<|recipient|>retrieve_fact\n<|content|>{J}<|stop|>",
    "xml invoke": ('<function_calls>\n<invoke name="retrieve_fact">\n<parameter name="trace_id">s1#3</parameter>\n'
                   '<parameter name="offset">2</parameter>\n<parameter name="limit">4</parameter>\n</invoke>\n'
                   "</function_calls>"),
    "constraint wording": f"I will call the retrieve_fact tool with {J} to read the message.",
}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_each_family_parses(family):
    calls = parse_tool_calls(CALLS[family])
    assert [(c.name, c.arguments) for c in calls] == [("retrieve_fact", ARGS)]
    req = NativeToolFormatter("en").detect_fact_request("Let me look that up.\n" * 0 + CALLS[family])
    assert (req.trace_id, req.offset, req.limit) == ("s1#3", 2, 4)


def test_the_seed_formatters_read_their_families_real_shapes():
    """Before: the DeepSeek formatter counted DeepSeek-V3's real call as malformed and the GLM
    formatter missed a bare GLM-4 call."""
    ds, glm = DeepSeekFormatter("en"), GLMFormatter("en")
    assert ds.detect_fact_request(CALLS["deepseek v3"]).trace_id == "s1#3" and ds.malformed_calls == 0
    assert ds.detect_fact_request(CALLS["deepseek v3.1"]).offset == 2
    assert glm.detect_fact_request(CALLS["glm4 bare"]).limit == 4 and glm.malformed_calls == 0
    # their own written calls still round-trip, and the text protocol still works in all of them
    for f in (ds, glm, GenericFormatter("en"), NativeToolFormatter("en")):
        assert f.detect_fact_request('retrieve_fact(trace_id="s1#3", offset=2, limit=4)').limit == 4
    req = ds.detect_fact_request(ds.format_fact_call(ds._request("m9", 1, 3)))
    assert (req.trace_id, req.offset, req.limit) == ("m9", 1, 3)


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "retrieve_fact", "arguments": {"trace_id": "s1#3"</tool_call>',  # cut JSON
    "[TOOL_CALLS]retrieve_fact[ARGS]not json",
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>retrieve_fact\nno json here<｜tool▁call▁end｜>",
    '<tool_call>{"arguments": {"trace_id": "x"}}</tool_call>',  # no name
])
def test_broken_native_calls_are_counted_malformed(text):
    with pytest.raises(MalformedToolCall):
        parse_tool_calls(text)
    f = NativeToolFormatter("en")
    assert f.detect_fact_request(text) is None and f.malformed_calls == 1


def test_bad_arguments_and_other_tools():
    f = NativeToolFormatter("en")
    assert f.detect_fact_request('<tool_call>{"name": "retrieve_fact", "arguments": {"trace_id": "a", "offset": true}}'
                                 '</tool_call>') is None  # JSON true is not an offset
    assert f.detect_fact_request('<tool_call>{"name": "web_search", "arguments": {"q": "x"}}</tool_call>') is None
    assert f.malformed_calls == 2
    assert f.detect_fact_request("Your cat is called Pixel.") is None and f.malformed_calls == 2
    assert parse_tool_calls('{"name": "something_else", "parameters": {}}') == []  # a bare JSON answer is no call


# a small tools-capable chat template written for this test (renders tools, tool calls and tool results)
TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<assistant>{% for c in m.tool_calls %}"
    "<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}</tool_call>"
    "{% endfor %}</assistant>\n"
    "{% elif m.role == 'tool' %}<tool_result>{{ m.content }}</tool_result>\n"
    "{% else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture
def tool_model():
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import prepare_model

    from tests.models.tiny import tiny_model

    hf, tok = tiny_model("qwen3")
    tok.chat_template = TEMPLATE
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    return TransformersChatModel(prepare_model(hf), tok, name="tiny-tools")


def test_tools_round_trip_through_apply_chat_template(tool_model):
    tok = tool_model.tokenizer
    assert template_supports_tools(tok)
    msgs = [{"role": "user", "content": "what is my cat called ?"}]
    prompt = tool_model.render(msgs, tools=[RETRIEVE_FACT_TOOL])
    assert json.loads(prompt.split("<tools>")[1].split("</tools>")[0]) == RETRIEVE_FACT_TOOL
    # the fact loop's native turns render as the template's own tool call + tool result
    turns = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "retrieve_fact", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": "retrieve_fact",
         "content": "[FACT_SEGMENT] the cat is pixel"}]
    rendered = tool_model.render(msgs + turns, tools=[RETRIEVE_FACT_TOOL])
    assert [(c.name, c.arguments) for c in parse_tool_calls(rendered.split("<assistant>")[1])] == [("retrieve_fact",
                                                                                                    ARGS)]
    assert "<tool_result>[FACT_SEGMENT] the cat is pixel</tool_result>" in rendered


def test_decoding_keeps_tool_markers_that_are_special_tokens(tool_model):
    tok = tool_model.tokenizer
    ids = tok.encode(CALLS["hermes/qwen"], add_special_tokens=False)
    assert tok.convert_tokens_to_ids("<tool_call>") in ids  # a special token here, as in several families
    assert "<tool_call>" not in tok.decode(ids, skip_special_tokens=True)  # what the old decoding lost
    text = tool_model.decode_new(ids + [tok.eos_token_id])
    assert "<tool_call>" in text and "<eos>" not in text


def test_decoding_never_ends_in_half_a_character(model):
    """A Chinese character split by max_new_tokens used to end a prediction in U+FFFD."""
    ids = model.encode("猫咪很可爱")
    cut = [i for i in range(1, len(ids)) if model.tokenizer.decode(ids[:i]).endswith("\ufffd")]
    assert cut, "the test needs a cut inside a character"
    for i in cut:
        assert not model.decode_new(ids[:i]).endswith("\ufffd")
        assert model.tokenizer.decode(ids[:i]).startswith(model.decode_new(ids[:i]))
    gen = model.generate_full([{"role": "user", "content": "用中文介绍一下你自己。"}], max_new_tokens=7)
    assert "\ufffd" not in gen.text


@pytest.mark.parametrize("text", [
    "retrieve_", "retrieve_fact(trace_id=", '{"name": "retrieve_fa', '```json\n{"name": "retrieve_fact", "argu',
    "<tool_ca", "<function=retrieve_fact>{\"trace_id\": \"s1", "Action: retrieve_fact\nAction Input: {\"trace",
    CALLS["react json"], CALLS["xml invoke"], CALLS["functionary v3"], CALLS["deepseek v3"],
])
def test_a_call_cut_off_or_whole_is_a_call(text):
    assert has_call(text)


@pytest.mark.parametrize("text", [
    "Your cat is called Pixel.", "I don't know.", "Retrieve the keys from the hall table.", "我不知道。",
    '{"name": "Alice", "age": 3}', "Action movies, mostly.", "The function is called retrieve in the docs.",
    "Yes", "", "She said: use the tool with care {not json}.",
])
def test_an_answer_is_no_call(text):
    assert not has_call(text)


@pytest.mark.skipif(not os.path.isdir(AUDIT), reason="needs the LoCoMo audit under $DKILAB_DATA_DIR")
def test_no_real_reply_of_a_capable_model_reads_as_a_call():
    """GPT-4o-mini's 3,080 replies to LoCoMo (written by nobody here, with no tool offered): none is a call."""
    from dkilab.bench.abstention_real import replies

    every = replies(os.environ["DKILAB_DATA_DIR"])
    assert len(every) == 3080
    flagged = [k for k, r in every.items() if has_call(r["reply"]) or parse_tool_calls(r["reply"])]
    assert flagged == []
