"""One registry type for strategies, datasets, metrics, scorers, formatters and models, each typed by the
interface it holds; a new component is one file that registers itself."""
import pkgutil
import sys
import textwrap

import pytest
from dkilab.eval.data import DATASETS
from dkilab.eval.scoring import METRICS, SCORERS
from dkilab.models.specs import MODELS
from dkilab.recall.formatters import FORMATTERS
from dkilab.registry import Registry, UnknownNameError
from dkilab.strategies import STRATEGIES


def test_a_new_component_is_one_file_in_a_discovered_package(tmp_path, monkeypatch):
    pkg = tmp_path / "my_plugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "echo_strategy.py").write_text(textwrap.dedent("""
        from tests.test_registry import PLUGINS

        @PLUGINS.register("echo", version="3")
        class Echo:
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    global PLUGINS
    PLUGINS = Registry("plugin", discover="my_plugins")
    assert "echo" in PLUGINS and PLUGINS.meta("echo") == {"version": "3"}  # found without any import or list edit
    with pytest.raises(UnknownNameError, match=r"unknown plugin 'ecko' \(did you mean 'echo'\?\); registered: echo"):
        PLUGINS["ecko"]
    with pytest.raises(KeyError):
        PLUGINS["ecko"]  # a KeyError and a ValueError (pydantic validators turn it into a config error)
    with pytest.raises(ValueError, match="registered twice"):
        PLUGINS.add("echo", type("Other", (), {}))
    sys.modules.pop("my_plugins.echo_strategy", None)


def test_each_registry_refuses_what_is_not_its_interface():
    from dkilab.eval.scoring.base import Metric
    from dkilab.recall.formatters import GenericFormatter
    from dkilab.strategies.no_memory import NoMemory

    class NotAStrategy:
        name = "not_a_strategy"

    with pytest.raises(TypeError, match="strategy 'not_a_strategy' must be a subclass of Strategy"):
        STRATEGIES.add("not_a_strategy", NotAStrategy)
    with pytest.raises(TypeError, match="must be a subclass of Strategy"):
        STRATEGIES.add("an_instance", NoMemory())  # the class is registered, not an instance of it
    with pytest.raises(TypeError, match="prompt formatter 'plain' must be a subclass of PromptFormatter"):
        FORMATTERS.add("plain", str)
    with pytest.raises(TypeError, match="metric 'm' must be an instance of Metric"):
        METRICS.add("m", Metric)
    for registry in (DATASETS, SCORERS, MODELS):
        with pytest.raises(TypeError, match="must be callable"):
            registry.add("not_callable", 3)
    assert "not_a_strategy" not in STRATEGIES and "an_instance" not in STRATEGIES and "plain" not in FORMATTERS
    assert "m" not in METRICS and all("not_callable" not in r for r in (DATASETS, SCORERS, MODELS))
    assert FORMATTERS["generic"] is GenericFormatter and STRATEGIES["no_memory"] is NoMemory
    with pytest.raises(TypeError, match="not both"):
        Registry("x", subclass_of=object, instance_of=object)


def test_every_module_of_the_strategy_package_is_registered():
    import dkilab.strategies as pkg

    # one strategy per module; `base` and `_name` modules hold what several strategies share
    files = {m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")} - {"base"}
    assert files <= set(STRATEGIES) and {STRATEGIES.meta(n)["version"] for n in STRATEGIES}
    for name in STRATEGIES:
        cls = STRATEGIES[name]
        assert cls.name == name and STRATEGIES.meta(name)["needs_model"] == cls.needs_model


def test_components_declare_what_the_harness_asks_them():
    for name in DATASETS:
        meta = DATASETS.meta(name)
        assert meta["language"] in ("en", "cn", "mixed") and meta["scorer"] in SCORERS and meta["version"]
    assert {"score", "hallucination_rate", "recall_at_10", "prompt_tokens"} <= set(METRICS)
    assert {"generic", "deepseek", "glm"} <= set(FORMATTERS)
    assert {"offline", "openai", "transformers"} <= set(MODELS)
