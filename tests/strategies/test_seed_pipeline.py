"""`seed: true` on a recalling strategy: the whole pipeline as seed recall-v4 §6 writes it, one line away (issue 87
item 1). The experiment's defaults (dkilab's tuned values) do not reach it; keys given beside it move one value."""
import pytest
from dkilab.eval.harness.budgets import resolve
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict, identity_params

CFG = {"name": "seed-pipeline", "model": {"spec": "scripted:oracle", "max_context": 8192}, "tracing": False,
       "datasets": [{"name": "fixtures"}],
       "defaults": {"history_budget": 4096, "max_new_tokens": 64,
                    "recall": {"summary": {"per_message_threshold": 28}, "fact_call": {"protocol": "auto"},
                               "signals": {"vector_top_k": 20}}},
       "strategies": [{"name": "recall_v4", "label": "tuned"},
                      {"name": "recall_v4", "label": "seed", "params": {"seed": True}},
                      {"name": "full_attention", "label": "fa_seed", "params": {"seed": True}},
                      {"name": "recall_v4", "label": "seed_100",
                       "params": {"seed": True, "recall": {"summary": {"per_message_threshold": 100}}}}]}


@pytest.fixture(scope="module")
def cells():
    return {c.strategy.key: c for c in expand_cells(experiment_from_dict(CFG, "<test>"))}


def test_the_seed_cell_has_the_seeds_section_6_values_and_the_tuned_one_keeps_its_own(cells):
    seed, tuned = cells["seed"].params.recall, cells["tuned"].params.recall
    assert (seed.summary.per_message_threshold, seed.summary.max_tokens_per_summary, seed.summary.strategy) == (
        200, 150, "extractive")
    b = seed.budget
    assert (b.generation_reserve, b.instruction_reserve, b.min_recent_turns, b.max_recent_turns,
            b.reserve_from_history) == (512, 150, 2, 5, True)
    f = seed.fact_call
    assert (f.enabled, f.max_rounds, f.max_fact_tokens, f.batch_size, f.protocol) == (True, 3, 800, 5, "text")
    s = seed.signals
    assert (s.keyword_topk, s.keyword_method, s.vector_top_k, s.vector_threshold, s.fusion) == (5, "tfidf", 10, 0.5,
                                                                                                 "seed")
    assert seed.prompt_formatter == "auto" and cells["seed"].params.history_fields == []
    assert cells["seed"].params.history_budget == 4096  # the matched budget still reaches it
    assert tuned.summary.per_message_threshold == 28 and tuned.fact_call.protocol == "auto"
    assert tuned.signals.fusion == "learned" and not tuned.budget.reserve_from_history
    assert tuned.signals.vector_top_k == 20  # a recall-preset key given under defaults reaches the tuned row only
    assert cells["fa_seed"].params.recall.signals.fusion == "seed"


def test_a_key_beside_it_moves_one_value_and_the_switch_is_in_the_identity_only_when_on(cells):
    moved = cells["seed_100"].params.recall
    assert moved.summary.per_message_threshold == 100 and moved.budget.generation_reserve == 512
    assert "seed" not in identity_params(cells["tuned"].params)
    assert identity_params(cells["seed"].params)["seed"] is True
    assert len({c.config_hash for c in cells.values()}) == 4


def test_its_budget_takes_the_seeds_reserves_from_the_history(cells):
    seed, tuned = resolve(cells["seed"]), resolve(cells["tuned"])
    assert sum(seed["reserved"].values()) > 0 and not tuned["reserved"]
    assert seed["history"] == seed["matched"] - sum(seed["reserved"].values())
