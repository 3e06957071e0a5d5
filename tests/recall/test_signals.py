"""A recall signal added as one file (dkilab/recall/signals/): switched on by config with its weight, fused
with the built-in signals, its declared features in the learned fusion's rows; the shipped fusion model, not
fitted with them, gives them zero weight and says so; a model fitted with them scores them. Shown with the
bundled `recency` signal and one registered by a test, on the hand-made history of test_levers."""
import json
import warnings

import numpy as np
import pytest
from dkilab.config import ConfigError
from dkilab.recall import MultiSignalRecall, RecallConfig, learned
from dkilab.recall.config import validate_recall_config
from dkilab.recall.signals import SIGNALS, RecallSignal, register_signal
from dkilab.types import Memory, Message

from tests.recall.test_levers import ASKED, HISTORY


@pytest.fixture
def memory(store):
    store.add_messages(HISTORY)
    return store.for_user("alice")


def recall(memory, question, **signals):
    cfg = RecallConfig().with_updates({f"signals.{k}": v for k, v in ({"reference_enabled": False} | signals).items()})
    msr = MultiSignalRecall(cfg, None, memory)
    rows: dict = {}
    msr.on_candidates = lambda msgs, X: rows.update(ids=[x.message_id for x in msgs], X=X)
    return msr.recall(question, max_results=8, asked_at=ASKED), rows


def test_a_switched_on_signal_is_fused_with_its_weight(memory):
    plain, _ = recall(memory, "What did we cook?", fusion="weighted")
    with_recency, _ = recall(memory, "What did we cook?", fusion="weighted", plugins={"recency": 2.0})
    assert all("recency" not in r.signals for r in plain.ranked)
    assert with_recency.ranked[0].signals["recency"] == 1.0 and with_recency.ranked[0].message.message_id == "m7"
    zero, _ = recall(memory, "What did we cook?", fusion="weighted", plugins={"recency": 0.0})
    assert [r.message.message_id for r in zero.ranked] == [r.message.message_id for r in plain.ranked]


def test_its_features_join_the_rows_and_the_shipped_model_gives_them_zero_weight_saying_so(memory):
    _, off = recall(memory, "What did we cook?")
    with pytest.warns(UserWarning, match="not fitted with the features log_recency_rank: they get zero weight"):
        result, on = recall(memory, "What did we cook?", plugins={"recency": 0.0})  # fused with weight 0
    assert on["X"].shape[1] == len(learned.FEATURES) + 1 and off["X"].shape[1] == len(learned.FEATURES)
    assert on["ids"] == off["ids"] and np.array_equal(on["X"][:, :-1], off["X"])
    newest = max(HISTORY, key=lambda m: m.timestamp).message_id
    assert on["X"][on["ids"].index(newest), -1] == 0.0  # log1p(rank 0)
    assert result.ranked[0].signals.get("learned") is not None  # ranked by the model all the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per model and feature
        recall(memory, "What did we cook?", plugins={"recency": 0.0})


def test_a_model_fitted_with_a_signals_feature_scores_it_and_reads_it_as_its_mean_when_off():
    shipped = json.loads(learned.DEFAULT_MODEL.read_text())
    fitted = {**shipped, "features": [*shipped["features"], "log_recency_rank"], "guard": None,
              "models": {k: {f: [*v[f], 0.0 if f == "mean" else 1.0 if f == "scale" else -2.0]
                             for f in ("mean", "scale", "coef")}
                         | {"trained_on": v.get("trained_on", "")} for k, v in shipped["models"].items()}}
    model = learned.FusionModel(fitted, "fitted.json")
    assert model.columns == (*learned.FEATURES, "log_recency_rank")
    X = np.random.default_rng(0).normal(size=(6, len(learned.FEATURES)))
    rank = np.log1p(np.arange(6.0))[:, None]
    part = next(iter(model.parts))
    with_col = model.score(model.columns_of(np.hstack([X, rank]), (*learned.FEATURES, "log_recency_rank")), part)
    off = model.score(model.columns_of(X, learned.FEATURES), part)
    base = learned.FusionModel({**shipped, "guard": None}, "shipped.json").score(X, part)
    assert np.allclose(off, base) and np.allclose(with_col, base - 2.0 * rank[:, 0])


def test_a_signal_is_one_registered_class_and_the_config_names_an_unknown_one():
    @register_signal
    class Longest(RecallSignal):
        name = "longest"

        def hits(self, query, memory: Memory, *, filter=None, limit=50) -> list[tuple[Message, float]]:
            return sorted(((m, float(len(m.content))) for m in memory.recent(limit)), key=lambda x: -x[1])

    try:
        assert SIGNALS.meta("longest")["features"] == ("longest",)  # default feature: its normalised score
        cfg = validate_recall_config({"signals": {"plugins": {"longest": 0.5}}})
        assert cfg.signals.plugins == {"longest": 0.5}
        with pytest.raises(ConfigError, match=r"unknown recall signal 'longes' \(did you mean 'longest'\?\)"):
            validate_recall_config({"signals": {"plugins": {"longes": 0.5}}}, "x.yaml")
        with pytest.raises(TypeError, match="without '_'"):
            register_signal(type("Bad", (Longest,), {"name": "bad_name"}))
        with pytest.raises(TypeError, match="must be a subclass of RecallSignal"):
            SIGNALS.add("plain", object)
    finally:
        SIGNALS.remove("longest")


def test_a_signal_enters_a_cells_identity_only_when_switched_on(tmp_path):
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

    def cell(plugins):
        recall = {"signals": {"plugins": plugins}} if plugins is not None else {}
        return expand_cells(experiment_from_dict({
            "name": "x", "datasets": [{"name": "fixtures"}],
            "strategies": [{"name": "recall_only", "params": {"recall": recall}}]}))[0]

    plain, empty, on = cell(None), cell({}), cell({"recency": 0.5})
    assert plain.config_hash == empty.config_hash != on.config_hash
    assert on.identity["strategy_identity"]["signals"] == {"recency": "1"}
    assert on.instance.cards()["fusion_model"]["unfitted_features"] == "log_recency_rank"  # logged with the cell
    assert "unfitted_features" not in plain.instance.cards()["fusion_model"]
