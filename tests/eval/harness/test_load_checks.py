"""Config problems found when the file is read (issue 58 items 5, 13, 14): one line naming the key, before
any data or model loads; a filter that keeps nothing is an error, never an empty FINISHED cell."""
import pytest
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

from tests.conftest import ROOT

DIALOGUES = str(ROOT / "tests" / "data" / "scripted" / "dialogues.json")


def _cfg(**over):
    base = {"name": "t", "model": {"spec": "scripted:oracle"}, "tracing": False,
            "datasets": [{"name": "scripted", "path": DIALOGUES}], "strategies": [{"name": "no_memory"}]}
    return base | over


@pytest.mark.parametrize("spec, words", [
    ("openai:qwen", "openai:<model>@<base_url>"),
    ("openai:@http://127.0.0.1:9/v1", "openai:<model>@<base_url>"),
    ("scripted:no/such/answers.yaml", "no answers file"),
])
def test_a_model_spec_that_cannot_load_is_refused_when_read(spec, words):
    with pytest.raises(ConfigError, match="model.spec") as err:
        experiment_from_dict(_cfg(model={"spec": spec}))
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="sweep.model.spec"):
        experiment_from_dict(_cfg(sweep={"model.spec": ["scripted:oracle", spec]}))


def test_the_oracle_and_real_files_are_accepted():
    experiment_from_dict(_cfg())
    experiment_from_dict(_cfg(model={"spec": f"scripted:{ROOT / 'tests/data/personas/empty.yaml'}"}))


def test_labels_names_and_sweeps_that_would_mislead_are_refused():
    with pytest.raises(ConfigError, match=r"strategies.0.label: 'a@b': a label may not contain '@'"):
        experiment_from_dict(_cfg(strategies=[{"name": "no_memory", "label": "a@b"}]))
    with pytest.raises(ConfigError, match="name: 'dkilab-claim::x::y'"):
        experiment_from_dict(_cfg(name="dkilab-claim::x::y"))
    with pytest.raises(ConfigError, match=r"sweep.model.concurrency: repeats 16"):
        experiment_from_dict(_cfg(sweep={"model.concurrency": [16, 16]}))


@pytest.mark.parametrize("dataset, words", [
    ({"categories": ["nosuch"]},
     "categories: ['nosuch'] matches no question (its categories: adversarial, single_hop, temporal)"),
    ({"languages": ["en"], "categories": ["nosuch"]}, "matches no question"),
])
def test_a_filter_that_keeps_nothing_is_an_error_naming_the_key(dataset, words):
    from dkilab.eval.harness.cell import load_cell_questions

    cfg = experiment_from_dict(_cfg(datasets=[{"name": "scripted", "path": DIALOGUES} | dataset]))
    (cell,) = expand_cells(cfg)
    with pytest.raises(ConfigError) as err:
        load_cell_questions(cell, None)
    assert words in str(err.value) and "scripted" in str(err.value)


@pytest.mark.parametrize("edit, needle", [
    ({"defaults": {"history_budget": True}}, "history_budget: true is a yes/no"),
    ({"model": {"spec": "offline:smollm2", "max_context": 1e30}}, "model.max_context"),
    ({"model": {"spec": "offline:smollm2", "dtype": "float8"}}, "model.dtype"),
    ({"model": {"spec": "offline:smollm2", "max_retries": True}}, "max_retries: true is a yes/no"),
    ({"sweep": {"model.concurrency": [1, 2]}}, "sweep.model.concurrency: model.concurrency is how the model runs"),
    ({"embedder": {"model": "offline:nosuch"}}, "embedder.model: unknown encoder 'offline:nosuch'"),
    ({"sweep": {"embedder.model": ["offline:minilm", "nosuch:enc"]}}, "sweep.embedder.model: unknown encoder"),
    ({"expect": {"no_memory": {"scroe": [0, 1]}}},
     "expect.no_memory.scroe: unknown metric 'scroe' (did you mean 'score'"),
])
def test_config_problems_found_at_load_not_after_the_run(edit, needle):
    """Issue 58 items 13 and 14: each was accepted (or found only after data and model had loaded)."""
    cfg = {"name": "checks", "datasets": [{"name": "fixtures"}], "strategies": [{"name": "no_memory"}]} | edit
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_interval_bounds_and_cell_counts_are_metrics_expect_may_name():
    experiment_from_dict({"name": "ok", "datasets": [{"name": "fixtures"}], "strategies": [{"name": "no_memory"}],
                          "expect": {"no_memory": {"score_ci95_low": [0, 1], "questions": [1, 99],
                                                   "response_cache_hits": [0, 9]}}})


def test_a_damaged_response_cache_is_moved_aside_by_name_and_the_run_goes_on(tmp_path):
    """Issue 58 item 8: a damaged responses.sqlite failed every cached cell, every run, without naming it."""
    from dkilab.models.response_cache import ResponseCache
    from dkilab.models.text_only import TextOnlyModel
    from dkilab.types import Generation

    path = tmp_path / "responses.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.warns(UserWarning, match=r"response cache .*responses.sqlite could not be read.*moved to "
                                         r"responses.sqlite.damaged-"):
        cache = ResponseCache(path)
    cache.put("k", TextOnlyModel("m"), Generation("hello", 3, 1))
    assert cache.get("k").text == "hello"
    assert len(list(tmp_path.glob("responses.sqlite.damaged-*"))) == 1
    cache.close()


def test_a_yaml_alias_bomb_is_refused_before_it_grows(tmp_path):
    """Issue 58 item 9: a 1 KB config of nested aliases under datasets[].categories grew memory at ~60 MB/s
    while its hash was computed."""
    import resource

    from dkilab.eval.harness.experiment import load_experiment

    lines = ["name: bomb", "strategies: [{name: no_memory}]", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}]" for i in range(1, 9)]
    lines.append("datasets: [{name: fixtures, categories: *a8}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 1200
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError, match=r"bomb.yaml: over 200,000 values once its aliases"):
        load_experiment(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KB: nothing was expanded


def test_an_absent_dataset_exits_2_at_load_in_one_line_and_leaves_the_store_as_it_was(tmp_path, monkeypatch, capsys):
    """Issue 83 item 2: a registered dataset whose files are not in the data dir, or a `path:` file that is not
    there, is refused before any run is created, once, naming the dataset, where it looked and how to get it."""
    import yaml
    from dkilab.cli import main

    monkeypatch.delenv("DKILAB_DATA_DIR", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "badinput", "tracing": False, "model": {"spec": "scripted:oracle"},
                                    "datasets": [{"name": "locomo"}, {"name": "mine", "path": "no/such.jsonl"}],
                                    "strategies": [{"name": "no_memory"}, {"name": "full_history"}]}))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["run", str(path), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err  # one line per absent dataset, once each (not per cell)
    assert "datasets (locomo)" in err[0] and "DKILAB_DATA_DIR" in err[0] and "datasets/locomo.md" in err[0]
    assert "datasets (mine)" in err[1] and "no/such.jsonl" in err[1]
    assert not (tmp_path / "m.db").exists()  # nothing was created, let alone a FAILED run
    data = tmp_path / "data"
    data.mkdir()
    assert main(["run", str(path), "--tracking-uri", uri, "--data-dir", str(data)]) == 2
    assert f"{data}" in capsys.readouterr().err  # the directory it looked in


def test_a_bad_value_under_defaults_is_named_at_defaults():
    with pytest.raises(ConfigError, match=r"defaults\.history_budget: Input should be greater than or equal to 0"):
        experiment_from_dict(_cfg(defaults={"history_budget": -5}))
    with pytest.raises(ConfigError, match=r"strategies\.0 \(no_memory\).*history_budget"):  # the strategy's own
        experiment_from_dict(_cfg(strategies=[{"name": "no_memory", "params": {"history_budget": -5}}]))


def test_a_cells_strategy_is_built_with_its_kv_budget_and_opens_its_response_cache_when_it_generates(monkeypatch):
    """The strategy instance gets `model.kv_cache_mb` and `model.cache` when the cell builds it, nothing set on it
    afterwards; the response cache (an SQLite file) opens on the first generation only, once, keyed by the weights."""
    import dkilab.models.response_cache as responses

    opened = []
    monkeypatch.setattr(responses, "shared", lambda digest=None: opened.append(digest) or object())
    cached, plain = (expand_cells(experiment_from_dict(_cfg(model={"spec": "scripted:oracle", "kv_cache_mb": 3,
                                                                   "cache": c}), "<t>"))[0] for c in (True, False))
    assert cached.instance.kv_cache_bytes == 3 * 1024**2 and opened == []  # built, nothing opened
    assert cached.instance.response_cache is cached.instance.response_cache and len(opened) == 1
    assert plain.instance.response_cache is None and len(opened) == 1
