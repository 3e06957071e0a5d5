"""The published LoCoMo "J" judge as a protocol: its prompt read as a literal from a copy of mem0's judge script
(here a stand-in with the same constant and placeholders), the JSON label read as the verdict, a reply without
JSON read by its first label, categories 1-4 judged and category 5 left to the hallucination metrics; a
scripted answer model and a scripted judge, end to end."""
import pytest
from dkilab.config import ConfigError
from dkilab.eval.scoring.locomo_j import LocomoJ, load_template
from dkilab.types import QAItem

from tests.conftest import ROOT

SCRIPT = ROOT / "tests" / "data" / "mem0" / "llm_judge.py"


def test_the_prompt_is_read_as_a_literal_and_filled_in():
    template = load_template(SCRIPT)  # the module body raises: it was not run
    text = LocomoJ(template).text(QAItem("Where did Ana go?", "Oslo"), "To {Oslo}", "Oslo")
    assert text.startswith("[J]") and "Question: Where did Ana go?" in text and "Generated answer: To {Oslo}" in text


@pytest.mark.parametrize("reply, verdict", [('{"label": "CORRECT"}', 1.0), ('Sure: {"label": "WRONG"}', 0.0),
                                            ('```json\n{"label": "correct"}\n```', 1.0), ("CORRECT", 1.0),
                                            ("It is wrong.", 0.0), ("unclear", None),
                                            ('{"label": "maybe"} no idea', None)])
def test_the_verdict_is_the_json_label_else_the_first_label_named(reply, verdict):
    assert LocomoJ("{question}{gold_answer}{generated_answer}").verdict(reply) == verdict


def test_a_file_without_the_prompt_is_refused_naming_it(tmp_path):
    (tmp_path / "judge.py").write_text("ACCURACY_PROMPT = 'no placeholders'\n")
    with pytest.raises(ConfigError, match="ACCURACY_PROMPT is not a string with {question}"):
        load_template(tmp_path / "judge.py")
    (tmp_path / "other.py").write_text("PROMPT = '{question}'\n")
    with pytest.raises(ConfigError, match="no ACCURACY_PROMPT string"):
        load_template(tmp_path / "other.py")


def test_a_prompt_assigned_twice_is_refused_and_an_annotated_one_is_read(tmp_path):
    """Issue 85: the reader took the first of two assignments, Python the last; `ACCURACY_PROMPT: str = ...` was
    reported as having no prompt."""
    fields = "{question} {gold_answer} {generated_answer}"
    (tmp_path / "twice.py").write_text(f"ACCURACY_PROMPT = 'old {fields}'\nACCURACY_PROMPT = 'new {fields}'\n")
    with pytest.raises(ConfigError, match=r"ACCURACY_PROMPT is assigned 2 times \(lines 1, 2\); keep one"):
        load_template(tmp_path / "twice.py")
    (tmp_path / "typed.py").write_text(f"ACCURACY_PROMPT: str = 'typed {fields}'\n")
    assert load_template(tmp_path / "typed.py") == f"typed {fields}"


def test_categories_one_to_four_are_judged_with_the_protocol_and_the_card_names_it(tmp_path):
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.eval.views.card import methodology_card

    answers = tmp_path / "answers.yaml"
    answers.write_text('default: "I am not sure, maybe Paris."\n')
    verdicts = tmp_path / "judge.yaml"
    verdicts.write_text('answers:\n  - {match: "[J]", outputs: [\'{"label": "WRONG"}\']}\n')
    cfg = experiment_from_dict({
        "name": "locomo-j", "model": {"spec": f"scripted:{answers}", "max_context": 4096},
        "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 4}], "strategies": [{"name": "no_memory"}],
        "tracing": False, "judge": {"model": f"scripted:{verdicts}", "protocol": "locomo_j",
                                    "prompts_from": str(SCRIPT)}})
    (result,) = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    judged = [r for r in result.rows if "judge" in r]
    assert judged and all(r["answerable"] and r["judge"] == 0.0 for r in judged), [(r["answerable"], r.get("judge"),
                                                                                    r.get("judge_reply"))
                                                                                   for r in result.rows]
    assert all("judge" not in r for r in result.rows if not r["answerable"])  # left to the hallucination metrics
    assert result.metrics["judge_score"] == 0.0
    assert methodology_card(cfg, [result], {})["judge"]["protocol"] == "locomo_j"
