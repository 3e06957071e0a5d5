"""A sweep value that cannot change its cell is refused when the file is read, naming the key and why;
threshold sweeps are checked against the data's own message lengths (printed)."""
import pytest
import yaml
from dkilab.config import ConfigError
from dkilab.eval.harness.experiment import check_config, load_experiment
from dkilab.eval.harness.sweep_data import check_thresholds

from tests.conftest import ROOT


def _cfg(tmp_path, **extra):
    data = {"name": "noop", "model": {"max_context": 1536}, "defaults": {"history_budget": 256}, "tracing": False,
            "datasets": [{"name": "fixtures", "question_limit": 1}], "strategies": [{"name": "recall_v4",
                                                                                     "label": "v4"}]}
    path = tmp_path / "noop.yaml"
    path.write_text(yaml.safe_dump(data | extra, allow_unicode=True))
    return path


def test_the_old_gpu_kv_alpha_file_is_refused():
    """experiments/gpu/kv_alpha.yaml before this check: preference alphas on LoCoMo, which has no preferences
    (10 of its 15 cells identical); its history cap renamed to today's key so the sweep check is what fails."""
    with pytest.raises(ConfigError,
                       match=r"old_gpu_kv_alpha\.yaml: sweep\.stable\.preference_alpha: cannot change cell "
                                          r"stable@locomo\[preference_alpha=0\.0\]: there is no preference block to "
                                          r"scale"):
        load_experiment(ROOT / "tests" / "data" / "old_gpu_kv_alpha.yaml")
    cells = check_config(load_experiment(ROOT / "experiments" / "gpu" / "kv_alpha.yaml"))
    assert {c.dataset.name for c in cells if "preference_alpha" in str(c.point)} == {"fixtures"}


@pytest.mark.parametrize("extra, pattern", [
    ({"sweep": {"v4.preference_alpha": [0.2, 0.4]}, "model": {"generate": False}},
     r"sweep\.v4\.preference_alpha: cannot change cell .*model\.generate is false"),
    ({"datasets": [{"name": "locomo"}], "sweep": {"params.preference_alpha": [0.2, 0.4]}},
     r"sweep\.params\.preference_alpha: .*no preference block"),
    ({"strategies": [{"name": "recall_v4", "label": "v4", "params": {"recall": {"strategy": "flat_history"}}}],
      "sweep": {"v4.recall.summary.per_message_threshold": [20, 60]}},
     r"sweep\.v4\.recall\.summary\.per_message_threshold: .*recall\.strategy is flat_history"),
    ({"strategies": [{"name": "recall_v4", "label": "v4", "params": {"recall": {"fact_call": {"enabled": False}}}}],
      "sweep": {"v4.recall.fact_call.max_fact_tokens": [200, 400]}},
     r"max_fact_tokens: .*fact_call\.enabled is false"),
    ({"sweep": {"v4.recall.strategy": ["flat_history", "summary_with_fact_call"],
                "v4.recall.summary.max_tokens_per_summary": [40, 80]}},
     r"max_tokens_per_summary: cannot change cell .*flat_history"),  # a knob another sweep key switches off
    ({"strategies": [{"name": "recall_v4", "label": "v4"}, {"name": "full_attention", "label": "fa"}],
      "sweep": {"params.recall.summary.per_message_threshold": [20, 60]}},
     r"cannot change cell fa@fixtures.*full_attention does not build a recall-v4 suffix"),
    ({"strategies": [{"name": "full_attention", "label": "fa"}], "model": {"generate": False},
      "sweep": {"fa.history_alpha": [0.5, 1.0]}}, r"sweep\.fa\.history_alpha: .*model\.generate is false"),
    ({"strategies": [{"name": "session_l2"}], "model": {"generate": False}, "datasets": [{"name": "session_flow"}]},
     r"strategy 'session_l2' has no context-only mode"),
])
def test_dead_sweep_points_are_refused_at_load(tmp_path, extra, pattern):
    with pytest.raises(ConfigError, match=pattern) as err:
        load_experiment(_cfg(tmp_path, **extra))
    assert "\n" not in str(err.value)


def test_live_sweeps_still_load(tmp_path):
    ok = load_experiment(_cfg(tmp_path, sweep={"v4.preference_alpha": [0.2, 0.4],
                                               "v4.recall.summary.per_message_threshold": [20, 60]}))
    assert len(check_config(ok)) == 4


def test_thresholds_are_checked_against_the_message_lengths(tmp_path, model):
    said = []
    cfg = load_experiment(_cfg(tmp_path, sweep={"v4.recall.summary.per_message_threshold": [15, 60]}))
    check_thresholds(cfg, check_config(cfg), echo=said.append)
    assert said and said[0].startswith("fixtures: ") and "p50" in said[0] and "summarised at 15:" in said[0]
    dead = load_experiment(_cfg(tmp_path, sweep={"v4.recall.summary.per_message_threshold": [2000, 3000]}))
    with pytest.raises(ConfigError, match=r"sweep\.v4\.recall\.summary\.per_message_threshold: 2000 and 3000 "
                                          r"summarise the same messages of fixtures"):
        check_thresholds(dead, check_config(dead), echo=said.append)


def test_variants_that_change_nothing_are_named_after_the_run(tmp_path):
    """Found on full MemDaily: two fusions that rank differently gave identical cells, because at a budget the
    recent turns fill the ranking never reaches the context. Labelled variants of one strategy (not only
    sweep points) that give the same prompts, contexts and answers on every question are named after the
    run; variants that do differ are not."""
    from dkilab.eval.harness.runner import run_experiment

    def fa(label, **recall_params):
        return {"name": "full_attention", "label": label, "params": recall_params}

    path = _cfg(tmp_path, name="inert-variants", model={"max_context": 1024, "generate": False},
                datasets=[{"name": "fixtures", "question_limit": 3}],
                strategies=[fa("tight_learned", history_budget=24),
                            fa("tight_weighted", history_budget=24, recall={"signals": {"fusion": "weighted"}}),
                            fa("roomy", history_budget=400)])
    said: list[str] = []
    run_experiment(load_experiment(path), uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False,
                   echo=lambda *a: said.append(" ".join(map(str, a))))
    notes = [s for s in said if s.startswith("note: ")]
    assert any("tight_learned and tight_weighted: recall.signals.fusion = learned and weighted gave the same" in n
               for n in notes), said
    assert not any("roomy" in n for n in notes), notes
