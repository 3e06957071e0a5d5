"""Split discipline (issue 57): a cell that would evaluate a fitted component (the learned fusion model,
the encoder adapter) on the conversations it was fitted on is refused when the config is read, naming the
component; held-back slices, stock components and declared dev studies load."""
import pytest
import yaml
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import load_experiment


def _load(tmp_path, datasets, strategies=({"name": "recall_v4"},), **extra):
    cfg = {"name": "split", "model": {"spec": "offline:smollm2", "max_context": 4096, "generate": False},
           "defaults": {"history_budget": 1024}, "datasets": list(datasets), "strategies": list(strategies)} | extra
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_experiment(path)


def test_the_shipped_defaults_on_locomo_0_4_are_refused_naming_the_fusion_model(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, [{"name": "locomo", "limit": 5}], [{"name": "recall_v4"}, {"name": "full_attention"}])
    lines = str(e.value).splitlines()
    assert len(lines) == 2 and all("split: cell" in ln for ln in lines)  # one line per cell
    assert "locomo conversations 0-4" in lines[0]
    assert "the learned fusion model (dkilab/recall/fusion_lr.json)" in lines[0]
    assert "the encoder adapter offline:minilm-locomo" in lines[0]


@pytest.mark.parametrize("dataset", [{"name": "locomo"}, {"name": "locomo", "limit": 6, "split": "test"},
                                     {"name": "memdaily", "limit": 48}, {"name": "madial_bench_zh", "split": "dev"},
                                     {"name": "locomo", "split": "ablation"},
                                     {"name": "locomo_sessions", "split": "dev"},
                                     {"name": "locomo", "split": "dev", "granularity": "session"}])
def test_every_slice_that_reaches_fitted_conversations_is_refused(tmp_path, dataset):
    with pytest.raises(ConfigError, match="learned fusion model"):
        _load(tmp_path, [dataset])


@pytest.mark.parametrize("dataset", [{"name": "locomo", "split": "test"}, {"name": "locomo", "first": 5, "limit": 1},
                                     {"name": "memdaily", "first": 150, "limit": 48}, {"name": "fixtures"},
                                     {"name": "madial_bench_en", "split": "test"},
                                     {"name": "locomo_sessions", "split": "test"}])
def test_held_back_slices_load(tmp_path, dataset):
    assert _load(tmp_path, [dataset])


def test_stock_components_and_strategies_without_them_take_the_whole_dataset(tmp_path):
    stock = {"name": "recall_v4", "params": {"recall": {"signals": {"fusion": "weighted"}}},
             "embedder": {"english": "offline:minilm"}}
    assert _load(tmp_path, [{"name": "locomo"}], [stock, {"name": "full_history"}, {"name": "stable"}])
    with pytest.raises(ConfigError, match="encoder adapter") as e:  # weighted fusion, but the adapter still embeds
        _load(tmp_path, [{"name": "locomo"}], [{"name": "recall_v4", "params": stock["params"]}])
    assert "learned fusion" not in str(e.value)


def test_a_declared_dev_study_may_use_dev_but_not_the_whole_dataset(tmp_path):
    assert _load(tmp_path, [{"name": "locomo", "split": "dev"}], purpose="tune")
    with pytest.raises(ConfigError, match="purpose: tune for a dev study"):
        _load(tmp_path, [{"name": "locomo", "split": "dev"}])
    with pytest.raises(ConfigError, match="conversations 0-9"):
        _load(tmp_path, [{"name": "locomo"}], purpose="tune")


def test_first_selects_conversations_past_the_fitted_ones(tmp_path):
    from dkilab.eval.harness.experiment import expand_cells
    from dkilab.eval.harness.fitted import asked

    cfg = _load(tmp_path, [{"name": "locomo", "first": 5, "limit": 2, "split": "test"}])
    assert asked(expand_cells(cfg)[0]) == (6, 7)


def test_first_is_applied_when_questions_are_read(tmp_path):
    from dkilab.eval.data import load_dataset
    from dkilab.eval.data.selection import select_questions
    from dkilab.eval.harness.experiment import expand_cells

    every = load_dataset("fixtures")
    cell = expand_cells(_load(tmp_path, [{"name": "fixtures", "first": 2, "limit": 1}], [{"name": "full_history"}]))[0]
    convs, items = select_questions(cell.dataset, None)
    assert [c.conversation_id for c in convs] == [every[2].conversation_id]
    assert {q.qid for _, q in items} == {q.qid for q in every[2].questions}
    assert cell.config_hash != expand_cells(_load(tmp_path, [{"name": "fixtures", "limit": 1}],
                                                  [{"name": "full_history"}]))[0].config_hash


def test_a_file_dataset_is_never_taken_for_a_registered_one(tmp_path):
    """A normalised file labelled `locomo` is the user's own data: no component was fitted on it."""
    from dkilab.eval.harness.experiment import expand_cells
    from dkilab.eval.harness.fitted import asked

    from tests.conftest import ROOT

    own = {"name": "locomo", "path": str(ROOT / "tests" / "data" / "scripted" / "dialogues.json")}
    assert asked(expand_cells(_load(tmp_path, [own]))[0]) is None
