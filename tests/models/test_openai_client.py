"""The OpenAI-compatible client against local loopback servers: requests in flight, 429 / 5xx
retries with backoff, a server that hangs, native tool calls coming back as text."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dkilab.models import load_model
from dkilab.models.openai_client import EndpointError


class Server:
    """A scripted /v1/chat/completions: `plan` is a list of (status, delay s) consumed per request
    (then 200s), and the answer echoes the last user message."""

    def __init__(self, plan=(), delay=0.0, tool_call=None):
        self.plan, self.delay, self.tool_call = list(plan), delay, tool_call
        self.lock = threading.Lock()
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append((time.monotonic(), body))
                    status, delay = outer.plan.pop(0) if outer.plan else (200, outer.delay)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    time.sleep(delay)
                    if status != 200:
                        self.send_response(status)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Retry-After", "0")
                        self.end_headers()
                        self.wfile.write(json.dumps({"error": {"message": f"status {status}"}}).encode())
                        return
                    msg = {"role": "assistant", "content": "echo: " + body["messages"][-1]["content"]}
                    if outer.tool_call:
                        msg = {"role": "assistant", "content": None, "tool_calls": [{
                            "id": "c1", "type": "function",
                            "function": {"name": "retrieve_fact", "arguments": json.dumps(outer.tool_call)}}]}
                    out = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop", "message": msg}],
                           "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps(out).encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


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
    gens = client.generate_many([f"q{i}" for i in range(8)], max_new_tokens=4)
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
    from dkilab.recall.formatters import create_formatter
    from dkilab.recall.tool_calls import RETRIEVE_FACT_TOOL

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
