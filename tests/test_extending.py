"""docs/extending.md's examples, run as written: each is one file in the package its registry discovers (the path
the page names), registered by being there; a formatter's calls round-trip and `auto` picks it by model name, a
model backend loads by its scheme. (The judged metric's example runs end to end in
tests/eval/scoring/test_scorers.py.)"""
import importlib
import re
import sys

import pytest
from dkilab.models import load_model
from dkilab.models.specs import MODELS
from dkilab.recall.formatters import FORMATTERS, create_formatter, formatter_kind
from dkilab.types import ChatModel, FactRequest

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "extending.md"


def example(path: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text[text.index(f"(`{path}`)"):], re.S).group(1)


@pytest.fixture
def dropped_in(request):
    """The example written where the page says, discovered by its registry as a fresh process would."""
    path, registry, name = request.param
    target = ROOT / path
    assert not target.exists(), f"{target} is left from a stopped run of this test: delete it"
    registry.names()  # the package's own modules first
    target.write_text(example(path), encoding="utf-8")
    module = path.removesuffix(".py").replace("/", ".")
    try:
        registry._discovered = False  # read again: the new file is found by discovery, not imported by the test
        assert name in registry.names()
        yield registry[name]
    finally:
        target.unlink()
        sys.modules.pop(module, None)
        registry.remove(name)
        importlib.invalidate_caches()


@pytest.mark.parametrize("dropped_in", [("dkilab/recall/formatters/bracket.py", FORMATTERS, "bracket")],
                         indirect=True)
def test_a_formatter_is_one_file(dropped_in):
    assert formatter_kind("acme/BracketLM-7B") == "bracket" and formatter_kind("smollm2") == "generic"
    f = create_formatter("acme/bracketlm-7b", language="en")
    call = f.format_fact_call(FactRequest(trace_id="m7", offset=2, limit=3))
    assert call == "[[fact m7 2 3]]" and f.detect_fact_request(f"Let me check. {call}") == FactRequest("m7", None, 2, 3)
    assert f.detect_fact_request("The answer is Paris.") is None


@pytest.mark.parametrize("dropped_in", [("dkilab/models/backends/echo.py", MODELS, "echo")], indirect=True)
def test_a_model_backend_is_one_file(dropped_in):
    model = load_model("echo:hi", max_context=2048)
    assert isinstance(model, ChatModel) and model.context_window == 2048 and not model.supports_kv
    assert model.generate([{"role": "user", "content": "Say something."}]) == "hi"


def test_a_loader_that_returns_no_chat_model_is_refused_naming_it():
    MODELS.add("broken", lambda spec, **_: object())
    try:
        with pytest.raises(TypeError, match=r"model loader 'broken' returned object, which is not a ChatModel"):
            load_model("broken:x")
    finally:
        MODELS.remove("broken")
