"""The EverMemOS pipeline's judge as a protocol (`judge: {protocol: evermemos, prompts_from: prompts.yaml}`): its
prompts read from the user's YAML, its replies read as that pipeline reads them (src/evaluators/llm_judge.py)."""
import os

import pytest
from dkilab.eval.harness.experiment.schema import JudgeSpec
from dkilab.eval.scoring.evermemos_judge import verdict
from dkilab.eval.scoring.locomo_j import LocomoJ
from dkilab.types import QAItem

STAND_IN = """llm_judge:
  system_prompt: |
    You grade answers.
  user_prompt: |
    Question: {question}
    Gold answer: {golden_answer}
    Generated answer: {generated_answer}
    First explain in one sentence, then finish with CORRECT or WRONG, as JSON under "label".
"""
REAL = os.path.join(os.environ.get("DKILAB_DATA_DIR", "/nonexistent"), "locomo_audit", "evaluation", "config",
                    "prompts.yaml")

# the reply shapes the prompt asks for and the ones a model gives anyway, with the pipeline's verdict
REPLIES = [
    ('{"label": "CORRECT"}', 1.0),
    ('The generated answer names the same date as the gold. {"label": "CORRECT"}', 1.0),  # reasoning, then JSON
    ('It refers to a different city.\n```json\n{"label": "WRONG"}\n```', 0.0),  # fenced
    ('```\n{"label": " correct "}\n```', 1.0),  # case and spaces
    ('Both mention hiking, so it is not WRONG in spirit... {"label": "WRONG"}', 0.0),  # the JSON decides
    ("The answer matches the gold. CORRECT", 0.0),  # a bare label: no JSON, which the pipeline counts WRONG
    ("{'label': 'CORRECT'}", 0.0),  # not JSON
    ('{"verdict": "CORRECT"}', 0.0),  # no label key
    ("", 0.0),
]


@pytest.mark.parametrize("reply,expected", REPLIES)
def test_replies_are_read_as_the_pipeline_reads_them(reply, expected):
    assert verdict(reply) == expected


def test_mem0s_protocol_reads_a_bare_label_where_evermemos_counts_it_wrong():
    j = LocomoJ("{question} {gold_answer} {generated_answer}")
    assert j.verdict("The answer matches the gold. CORRECT") == 1.0
    assert verdict("The answer matches the gold. CORRECT") == 0.0
    assert j.verdict('reasoning. {"label": "WRONG"}') == 0.0 == verdict('reasoning. {"label": "WRONG"}')


def test_the_protocol_builds_the_prompt_from_the_users_yaml(tmp_path):
    path = tmp_path / "prompts.yaml"
    path.write_text(STAND_IN, encoding="utf-8")
    spec = JudgeSpec(model="offline:smollm2", protocol="evermemos", prompts_from=str(path))
    assert spec.max_new_tokens == 64  # room for the sentence of reasoning and the JSON
    proto = spec.protocol_object()
    text = proto.text(QAItem(qid="q", question="When did Ana move?", answer="2021"), "In 2021.", "2021")
    assert text.startswith("You grade answers.") and "Gold answer: 2021" in text
    assert "Generated answer: In 2021." in text
    assert spec.prompts() == {"system": "You grade answers.", "judge": proto.template}
    path.write_text("llm_judge:\n  user_prompt: 'Question: {question}'\n", encoding="utf-8")
    with pytest.raises(ValueError, match="golden_answer"):  # ConfigError, inside the spec's ValidationError
        JudgeSpec(protocol="evermemos", prompts_from=str(path))


@pytest.mark.skipif(not os.path.isfile(REAL), reason="needs the LoCoMo audit under $DKILAB_DATA_DIR")
def test_the_audits_prompts_file_loads_and_asks_for_the_json_label():
    spec = JudgeSpec(protocol="evermemos", prompts_from=REAL)
    proto = spec.protocol_object()
    assert "expert grader" in proto.system
    text = proto.text(QAItem(qid="q", question="Q?", answer="A"), "pred", "A")
    assert "Question: Q?" in text and "Gold answer: A" in text and "Generated answer: pred" in text
    assert '"label"' in text and "{golden_answer}" not in text
