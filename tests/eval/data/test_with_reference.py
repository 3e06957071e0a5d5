"""`with_reference: true` keeps the questions that carry a reference, the ones the recall scope can change
(experiments/reference_scope.yaml); off, a dataset spec keeps its cells' identity."""
import pytest
from dkilab.config import ConfigError
from dkilab.eval.harness.cell import load_cell_questions
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict


def _cell(**dataset):
    cfg = experiment_from_dict({"name": "x", "datasets": [{"name": "fixtures", **dataset}],
                                "strategies": [{"name": "recall_only"}]}, "x.yaml")
    return expand_cells(cfg, "x.yaml")[0]


def test_only_questions_with_a_reference_are_kept():
    kept = [q.question for _, q in load_cell_questions(_cell(with_reference=True), None)]
    assert kept == ["You said earlier which teas to start with. Which ones?",
                    "Which knee did I hurt in the crash just now?", "你刚才说绿野仙踪几点开门？"]
    assert len(load_cell_questions(_cell(), None)) == 48
    assert _cell().config_hash != _cell(with_reference=True).config_hash
    assert _cell().config_hash == _cell(with_reference=False).config_hash
    with pytest.raises(ConfigError, match="with_reference"):
        load_cell_questions(_cell(with_reference=True, categories=["preference_update"]), None)
