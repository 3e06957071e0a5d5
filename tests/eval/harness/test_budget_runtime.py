"""A question whose history a room or reserve would starve is refused (issue 84): the config's load check
estimates the instructions and the question in English with a 48-token allowance; the Chinese fixture users'
instructions, questions and preferences count ~85 tokens more with the SmolLM2 tokenizer, so a recall_v4 cell
the load check passes left their history a third of the matched budget, silently. Now the cell counts every
selected question with its model's tokenizer before asking any: over `max_error_rate` it is refused there;
within it, each starved question is an error row."""
import yaml
from dkilab.eval.harness.experiment import load_experiment
from dkilab.eval.harness.runner import run_experiment

CONFIG = {"name": "starved", "tracing": False, "max_error_rate": 1.0,
          # window = the check's 171 (instructions + question allowance) + 16 + recall_v4's room 1046 + 120
          "model": {"spec": "offline:smollm2", "max_context": 1353, "generate": False},
          "defaults": {"history_budget": 120, "max_new_tokens": 16},
          "datasets": [{"name": "fixtures", "question_limit": 2}],
          "strategies": [{"name": "recall_v4"}, {"name": "full_history"}]}


def test_a_starved_question_is_an_error_row_naming_the_parts_never_a_short_answer(tmp_path):
    path = tmp_path / "starved.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    cfg = load_experiment(path)  # the load check passes: its estimate fits
    results = {r.cell.strategy.name: r for r in run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}",
                                                                progress=False, echo=lambda *a: None)}
    v4 = results["recall_v4"]
    errors = [row for row in v4.rows if row.get("error")]
    assert {row["user_id"] for row in errors} == {"u_lin", "u_chen"} and len(errors) == 4  # the Chinese users
    for row in errors:
        assert "StarvedBudget" in row["error"] and "of the matched budget 120 (< half)" in row["error"], row["error"]
        assert "fact_calls 896" in row["error"] and "constraint 150" in row["error"]
    answered = [row for row in v4.rows if not row.get("error")]
    assert answered and all(row["budget"]["history"] == 120 for row in answered)  # the English ones: whole
    assert not any(row.get("error") for row in results["full_history"].rows)  # no room: nothing starved


def test_a_cell_with_more_starved_questions_than_its_error_budget_is_refused_before_asking_any(tmp_path):
    path = tmp_path / "starved.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "max_error_rate": 0.25, "strategies": [{"name": "recall_v4"}]}))
    cfg = load_experiment(path)  # the estimate still fits
    [v4] = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    assert not v4.rows and v4.error.startswith("StarvedBudget: cell recall_v4@fixtures: 4 of 8 questions would be "
                                               "starved, counted with offline:smollm2's tokenizer"), v4.error
    assert "(over max_error_rate 0.25), refused before asking any; first question u_lin:q0 (cn): recall_v4: history " \
           "54 of the matched budget 120" in v4.error and "question 22 + preferences 66" in v4.error
