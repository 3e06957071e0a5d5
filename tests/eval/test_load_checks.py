"""Config problems found when the file is read (issue 58 items 5, 13, 14): one line naming the key, before
any data or model loads; a filter that keeps nothing is an error, never an empty FINISHED cell."""
import pytest

from dkilab.config import ConfigError
from dkilab.eval.experiment import expand_cells, experiment_from_dict
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
    ({"categories": ["nosuch"]}, "categories: ['nosuch'] matches no question (its categories: adversarial, single_hop, temporal)"),
    ({"languages": ["en"], "categories": ["nosuch"]}, "matches no question"),
])
def test_a_filter_that_keeps_nothing_is_an_error_naming_the_key(dataset, words):
    from dkilab.eval.cell import load_cell_questions

    cfg = experiment_from_dict(_cfg(datasets=[{"name": "scripted", "path": DIALOGUES} | dataset]))
    (cell,) = expand_cells(cfg)
    with pytest.raises(ConfigError) as err:
        load_cell_questions(cell, None)
    assert words in str(err.value) and "scripted" in str(err.value)
