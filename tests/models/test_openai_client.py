"""The OpenAI-compatible client against local loopback servers: requests in flight, 429 / 5xx
retries with backoff, a server that hangs, native tool calls coming back as text."""
import json
import time

import pytest
from dkilab.models import load_model
from dkilab.models.backends.openai_client import EndpointError

from tests.fake_openai import Server


@pytest.fixture
def server(request):
    made = []

    def make(**kw):
        made.append(Server(**kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def test_n_requests_in_flight(server):
    s = server(delay=0.3)
    client = load_model(f"openai:m@{s.url}", concurrency=4)
    t = time.perf_counter()
    gens = client.generate_batch([f"q{i}" for i in range(8)], max_new_tokens=4)
    wall = time.perf_counter() - t
    assert [g.text for g in gens] == [f"echo: q{i}" for i in range(8)]  # in prompt order
    assert s.max_in_flight == 4 and len(s.requests) == 8
    assert wall < 8 * 0.3 * 0.75  # overlapped, not one after another
    assert gens[0].prompt_tokens == 7 and gens[0].new_tokens == 3  # the server's usage


def test_429_and_5xx_are_retried_then_succeed(server):
    s = server(plan=[(429, 0), (503, 0), (429, 0)])
    client = load_model(f"openai:m@{s.url}", max_retries=4)
    assert client.generate("hello") == "echo: hello"
    assert len(s.requests) == 4
    times = [t for t, _ in s.requests]
    assert all(b > a for a, b in zip(times, times[1:]))


def test_retries_run_out_with_one_clear_error(server):
    s = server(plan=[(429, 0)] * 10)
    client = load_model(f"openai:m@{s.url}", max_retries=2)
    with pytest.raises(EndpointError, match=r"answered 429 after 3 tries"):
        client.generate("hello")
    assert len(s.requests) == 3


def test_a_hanging_server_times_out_clearly(server):
    s = server(delay=30)
    client = load_model(f"openai:m@{s.url}", timeout=0.5, max_retries=1)
    t = time.perf_counter()
    with pytest.raises(EndpointError, match=r"no answer within 0.5 s \(2 tries\)"):
        client.generate("hello")
    assert time.perf_counter() - t < 10


def test_an_unreachable_server_fails_clearly():
    client = load_model("openai:m@http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    with pytest.raises(EndpointError, match="cannot reach http://127.0.0.1:9/v1"):
        client.generate("hello")


def test_native_tool_calls_come_back_as_parseable_text(server):
    from dkilab.prompts import RETRIEVE_FACT_TOOL
    from dkilab.recall.formatters import create_formatter

    s = server(tool_call={"trace_id": "m7", "offset": 2})
    client = load_model(f"openai:m@{s.url}")
    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "retrieve_fact", "arguments": {"trace_id": "m1"}}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "fact"}]
    text = client.generate(turns, tools=[RETRIEVE_FACT_TOOL])
    sent = s.requests[-1][1]
    assert sent["tools"][0]["function"]["name"] == "retrieve_fact"
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"trace_id": "m1"}
    req = create_formatter(kind="native").detect_fact_request(text)
    assert (req.trace_id, req.offset, req.limit) == ("m7", 2, 5)


class _Span:
    def __init__(self, name, log):
        self.name, self.attributes = name, {}
        log.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_inputs(self, inputs):
        pass

    def set_outputs(self, outputs):
        pass

    def set_attribute(self, key, value):
        self.attributes[key] = value


def test_a_served_models_span_names_the_model_the_server_knows(server, tmp_path):
    from dkilab import tracing
    from dkilab.models.backends.scripted import ScriptedModel
    from dkilab.types import ServedModel

    (tmp_path / "s.yaml").write_text("default: ok\n")
    scripted = ScriptedModel(tmp_path / "s.yaml")
    s = server()
    client = load_model(f"openai:gpt-x@{s.url}")
    log: list[_Span] = []

    class Tracer:
        def start_span(self, name, span_type=None):
            return _Span(name, log)

    with tracing.tracing_to(Tracer()):
        client.generate("hello")
        scripted.generate("hello")
    assert isinstance(client, ServedModel) and not isinstance(scripted, ServedModel)
    assert [sp.attributes["mlflow.llm.model"] for sp in log] == ["gpt-x", "scripted:s.yaml"]
