"""A scripted OpenAI-compatible server on 127.0.0.1 (the served-model path without vLLM): chat
completions that echo, fail on plan, hang, or answer with a native tool call; `/v1/models` lists models."""
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server:
    """A scripted /v1/chat/completions: `plan` is a list of (status, delay s) consumed per request
    (then 200s), and the answer echoes the last user message."""

    def __init__(self, plan=(), delay=0.0, tool_call=None, models=("fake", "m"), call_then_answer=False,
                 null_content=False, roots=None, memory_json=False):
        """`tool_call`: always answer with that retrieve_fact call; `call_then_answer`: like a served model
        behind vLLM's tool-call parser, call retrieve_fact on the first trace id of the prompt, then answer
        once the tool's result is in the conversation; `null_content`: a 200 with `content: null` and no
        tool call (a misconfigured server); `roots`: model -> the weights path `/models` reports (vLLM's `root`);
        `memory_json`: answer mem0's extraction prompt (its "## New Messages" section) with each new message as a
        memory, in mem0's JSON, as a model that follows that prompt does."""
        self.plan, self.delay, self.tool_call, self.models = list(plan), delay, tool_call, list(models)
        self.call_then_answer, self.null_content, self.roots = call_then_answer, null_content, dict(roots or {})
        self.memory_json = memory_json
        self.lock = threading.Lock()
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # /v1/models: what vLLM and SGLang list
                body = json.dumps({"object": "list", "data": [
                    {"id": m, "object": "model", "created": int(time.time() * 1000)}
                    | ({"root": outer.roots[m]} if m in outer.roots else {}) for m in outer.models]})
                self.send_response(200 if self.path.endswith("/models") else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

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
                    msg = {"role": "assistant", "content": None if outer.null_content
                           else "echo: " + body["messages"][-1]["content"]}
                    text = str(body["messages"][-1]["content"])
                    if outer.memory_json and "## New Messages" in text:
                        new = text.split("## New Messages", 1)[1].split("\n## ", 1)[0]
                        facts = [line.split(": ", 1)[1] for line in new.splitlines() if ": " in line]
                        msg["content"] = json.dumps({"memory": [{"text": f} for f in facts]})
                    call = outer.tool_call
                    if outer.call_then_answer and body.get("tools") and body["messages"][-1]["role"] != "tool":
                        ids = re.findall(r'trace_id="([^"]+)"', " ".join(str(m.get("content"))
                                                                         for m in body["messages"]))
                        call = {"trace_id": ids[0], "offset": 0, "limit": 2} if ids else None
                    if call:
                        msg = {"role": "assistant", "content": None, "tool_calls": [{
                            "id": "c1", "type": "function",
                            "function": {"name": "retrieve_fact", "arguments": json.dumps(call)}}]}
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
