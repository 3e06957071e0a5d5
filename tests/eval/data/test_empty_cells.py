"""A cell that selects no question is refused, naming the selection, never a FINISHED cell that measured nothing
(issue 85 item 5); an empty `languages:` or `categories:` list is refused when the config is read."""
import json

import pytest
from dkilab.config import ConfigError
from dkilab.eval.harness.cell import load_cell_questions
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

from tests.conftest import ROOT

DIALOGUES = ROOT / "tests" / "data" / "scripted" / "dialogues.json"


def _cell(dataset: dict):
    return expand_cells(experiment_from_dict({"name": "empty", "model": {"spec": "scripted:oracle"}, "tracing": False,
                                              "datasets": [dataset], "strategies": [{"name": "no_memory"}]}))[0]


def test_answerable_only_on_data_with_no_answerable_question_is_refused(tmp_path):
    data = json.loads(DIALOGUES.read_text())
    for conv in data["conversations"]:
        for q in conv["questions"]:
            q["answerable"] = False
    path = tmp_path / "unanswerable.json"
    path.write_text(json.dumps(data))
    cell = _cell({"name": "mine", "path": str(path), "answerable_only": True})
    with pytest.raises(ConfigError, match=r"datasets \(mine\): selects no question \(\d+ conversations, "
                                          r"answerable_only\); a cell would measure nothing"):
        load_cell_questions(cell, None)
    assert load_cell_questions(_cell({"name": "mine", "path": str(path)}), None)  # without the filter: questions


@pytest.mark.parametrize("dataset, why", [
    ({"name": "fixtures", "first": 10}, "0 conversations from first 10"),
    ({"name": "fixtures", "limit": 1, "split": "test"}, "0 of 1 conversations after split test"),
])
def test_a_selection_past_the_data_is_refused_naming_it(dataset, why):
    with pytest.raises(ConfigError, match=rf"selects no question \({why}\)"):
        load_cell_questions(_cell(dataset), None)


@pytest.mark.parametrize("key", ["languages", "categories"])
def test_an_empty_filter_list_is_refused_when_the_config_is_read(key):
    with pytest.raises(ConfigError, match=rf"{key}: \[\] selects nothing; leave {key} out to keep them all"):
        _cell({"name": "fixtures", key: []})
