"""load_model, ChatModel and the OpenAI-compatible client, on the real offline model."""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dkilab.models import ModelNotAvailableError, load_model
from dkilab.models.specs import _gguf_cache, offline_gguf

from tests.conftest import ROOT


def test_chat_model_generates_deterministically(model):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    out = model.generate(msgs, max_new_tokens=12)
    assert "Paris" in out and out == model.generate(msgs, max_new_tokens=12)
    prompt = model.render(msgs)
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    gen = model.generate_full(msgs, max_new_tokens=12, stop=["Paris"])
    assert "Paris" not in gen.text and gen.prompt_tokens == model.count_tokens(prompt)
    assert model.context_window >= 2048
    with pytest.raises(ValueError, match="context window"):
        model.generate("word " * model.context_window, max_new_tokens=4)
    with pytest.raises(TypeError, match="role"):
        model.generate([{"text": "hi"}])


def test_offline_model_is_cached_as_safetensors(model):
    cached = _gguf_cache(offline_gguf("offline:smollm2"))
    assert (cached / "model.safetensors").exists() and (cached / "config.json").exists()
    assert load_model() is model  # one object per process and spec
    # a fresh process loads from the cache (the figure itself is a benchmark: experiments/bench/models.py)
    code = ("import time; t = time.perf_counter(); from dkilab.models import load_model; m = load_model(); "
            "print(m.generate('Hello', max_new_tokens=2) is not None, time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split()[0] == "True"


def test_a_local_model_directory_loads_like_the_offline_spec(model):
    local = load_model(str(_gguf_cache(offline_gguf("offline:smollm2"))), max_context=1024)
    assert local is not model and local.context_window == 1024
    assert local.generate("The capital of France is", max_new_tokens=4) == model.generate("The capital of France is",
                                                                                          max_new_tokens=4)


def test_unknown_specs_fail_clearly(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="offline:nope"):
        load_model("offline:nope")
    with pytest.raises(ModelNotAvailableError, match="missing.gguf"):
        load_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="openai:<model>@<base_url>"):
        load_model("openai:only-a-name")


@pytest.fixture
def openai_server(model):
    """A minimal OpenAI-compatible /v1/chat/completions server answering with the real local model."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            if self.path != "/v1/chat/completions":
                self.send_response(404)
                self.end_headers()
                return
            gen = model.generate_full(body["messages"], max_new_tokens=body["max_tokens"], stop=body.get("stop"))
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": gen.text}}],
                              "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.new_tokens}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()


def test_openai_compatible_client(openai_server, model):
    from dkilab.models.kv import encode_memory, next_token_logits

    url, seen = openai_server
    client = load_model(f"openai:smollm2@{url}")
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    gen = client.generate_full(msgs, max_new_tokens=12)
    assert gen.text == model.generate(msgs, max_new_tokens=12) and gen.prompt_tokens > 10
    assert seen[-1]["model"] == "smollm2" and seen[-1]["temperature"] == 0.0
    mem = encode_memory(model, "The user likes tea.")
    with pytest.raises(TypeError, match="K/V"):
        client.generate("hi", memories=[(mem, 1.0)])
    with pytest.raises(TypeError, match="K/V"):
        next_token_logits(client, "hi")
    with pytest.raises(RuntimeError, match="404"):  # EndpointError is a RuntimeError
        load_model(f"openai:x@{url.rsplit('/', 1)[0]}/wrong").generate("hi")
