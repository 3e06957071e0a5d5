"""LongMemEval's answer check as a judge protocol: the templates are read from a copy of the official evaluation
script (here a stand-in with the same function and branches, tests/data/longmemeval/evaluate_qa.py), one per
question type and one for abstention; the verdict is the official one ("yes" in the lower-cased reply);
unanswerable questions are judged too and accuracy is over every question. A scripted model answers and a
scripted judge gives the verdicts, end to end through the runner."""
import pytest
from dkilab.config import ConfigError
from dkilab.eval.scoring import longmemeval_check as lme
from dkilab.types import QAItem

from tests.conftest import ROOT

DATA = ROOT / "tests" / "data"
SCRIPT = DATA / "longmemeval" / "evaluate_qa.py"


def test_each_question_type_gets_its_template_and_nothing_else_of_the_script_runs():
    templates = lme.load_templates(SCRIPT)  # the script's body raises: it was not run
    assert set(templates) == {*lme.QUESTION_TYPES, lme.ABSTENTION}
    assert lme.readable(templates["temporal-reasoning"]).endswith("Q: {question} Gold: {gold} Reply: {prediction} Say "
                                                                  "yes or no.")
    marks = {"single-session-user": "[basic]", "single-session-assistant": "[basic]", "multi-session": "[basic]",
             "temporal-reasoning": "[temporal", "knowledge-update": "[update",
             "single-session-preference": "[preference", lme.ABSTENTION: "[abstention]"}
    for kind, mark in marks.items():
        item = (QAItem("Q?", None, category="knowledge-update", answerable=False,
                       metadata={"explanation": "never said"})
                if kind == lme.ABSTENTION else QAItem("Q?", "gold {x}", category=kind))
        text = lme.check_text(templates, item, "my reply")
        assert text.startswith(mark) and "Q: Q?" in text and "Reply: my reply" in text, (kind, text)
        assert ("never said" if kind == lme.ABSTENTION else "gold {x}") in text  # braces kept as they are
    with pytest.raises(ValueError, match="'q9': LongMemEval has no answer check for the type 'open-domain'"):
        lme.check_text(templates, QAItem("Q?", "a", category="open-domain", qid="q9"), "r")


@pytest.mark.parametrize("reply, verdict", [("Yes.", 1.0), ("yes", 1.0), ("No, it does not.", 0.0), ("", 0.0),
                                            ("The answer is YES", 1.0), ("eyes", 1.0)])  # the official substring test
def test_the_verdict_is_yes_anywhere_in_the_lower_cased_reply(reply, verdict):
    assert lme.verdict(reply) == verdict


def test_a_missing_or_foreign_script_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        lme.load_templates(tmp_path / "evaluate_qa.py")
    (tmp_path / "other.py").write_text("def main():\n    pass\n")
    with pytest.raises(ConfigError, match=r"other.py: no function get_anscheck_prompt\(\)"):
        lme.load_templates(tmp_path / "other.py")
    (tmp_path / "bad.py").write_text("def get_anscheck_prompt(task, question, answer, response, abstention=False):\n"
                                     "    return 'no placeholders'\n")
    with pytest.raises(ConfigError, match="does not place the question, the answer and the response"):
        lme.load_templates(tmp_path / "bad.py")


def _config(tmp_path, judge_script, **judge):
    from dkilab.eval.harness.experiment import experiment_from_dict

    answers = tmp_path / "answers.yaml"
    answers.write_text('answers:\n  - {match: "breed", outputs: ["A beagle."]}\n'
                       '  - {match: "boots", outputs: ["6 days."]}\n'
                       '  - {match: "gym", outputs: ["You switched to IronWorks."]}\n')
    verdicts = tmp_path / "judge.yaml"
    verdicts.write_text('answers:\n  - {match: "[basic]", outputs: ["Yes."]}\n'
                        '  - {match: "[temporal", outputs: ["yes: one day off is tolerated"]}\n'
                        '  - {match: "[abstention]", outputs: ["No."]}\ndefault: "unclear"\n')
    return experiment_from_dict({
        "name": "lme-judge", "model": {"spec": f"scripted:{answers}", "max_context": 4096},
        "datasets": [{"name": "longmemeval_s"}], "strategies": [{"name": "full_history"}], "tracing": False,
        "judge": {"model": f"scripted:{verdicts}", "protocol": "longmemeval", "prompts_from": str(judge_script)}
        | judge})


def test_every_question_is_judged_by_its_type_and_accuracy_counts_the_abstention_questions(tmp_path, monkeypatch):
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.eval.views.card import methodology_card

    monkeypatch.setenv("DKILAB_DATA_DIR", str(DATA))
    cfg = _config(tmp_path, "longmemeval/evaluate_qa.py")  # under the data dir
    (result,) = run_experiment(cfg, data_dir=str(DATA), uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False,
                               echo=lambda *a: None)
    rows = {r["qid"]: r for r in result.rows}
    assert {q: r["judge_all"] for q, r in rows.items()} == {"q_user_1": 1.0, "q_time_1": 1.0, "q_update_1_abs": 0.0}
    assert rows["q_update_1_abs"]["judge_reply"] == "No." and rows["q_time_1"]["judge_reply"].startswith("yes")
    assert result.metrics.get("judge_accuracy") == pytest.approx(2 / 3), (result.status, result.error)
    assert result.metrics["judge_accuracy"] == pytest.approx(2 / 3) and result.metrics["judge_score"] == 1.0
    card = methodology_card(cfg, [result], {})["judge"]
    assert card["protocol"] == "longmemeval" and card["prompts_sha1"]


def test_the_templates_are_part_of_the_cells_identity_and_the_config_is_checked(tmp_path, monkeypatch):
    from dkilab.eval.harness.experiment import expand_cells

    monkeypatch.setenv("DKILAB_DATA_DIR", str(DATA))
    mine = tmp_path / "evaluate_qa.py"
    mine.write_text(SCRIPT.read_text())
    same = expand_cells(_config(tmp_path, mine))[0]
    assert same.config_hash == expand_cells(_config(tmp_path, SCRIPT))[0].config_hash  # where it lies is no matter
    assert "prompts_from" not in same.resolved["judge"] and same.resolved["judge"]["templates_sha1"]
    mine.write_text(SCRIPT.read_text().replace("[temporal, off by one day is fine]", "[temporal, exact days]"))
    assert expand_cells(_config(tmp_path, mine))[0].config_hash != same.config_hash
    with pytest.raises(ConfigError, match="protocol: longmemeval and prompts_from"):
        _config(tmp_path, SCRIPT, prompts_from=None)
    with pytest.raises(ConfigError, match="does not exist"):
        _config(tmp_path, tmp_path / "nowhere.py")


def test_no_code_of_the_script_runs_decorators_defaults_or_body(tmp_path, monkeypatch):
    """Issue 85 item 6: the function used to be compiled and called, so its decorator, its default arguments and
    its body ran at config read (marker files, an environment rewritten, an endless loop hanging `dkilab run`)."""
    marker = tmp_path / "ran"
    monkeypatch.setenv("DKILAB_CACHE_DIR", "untouched")
    side = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    body = SCRIPT.read_text().split("def get_anscheck_prompt", 1)[1].split("\n\n\nraise", 1)[0]
    decorated = tmp_path / "decorated.py"
    decorated.write_text(f"def mark(f):\n    {side}\n    return f\n\n\n@mark\ndef get_anscheck_prompt"
                         + body.replace("abstention=False", f"abstention=({side} and False)") + "\n")
    assert lme.readable(lme.load_templates(decorated)["knowledge-update"]).startswith("[update")
    assert not marker.exists()
    for statement in (side, "import os; os.environ['DKILAB_CACHE_DIR'] = 'rewritten'", "while True:\n        pass"):
        script = tmp_path / f"s{len(statement)}.py"
        script.write_text("def get_anscheck_prompt(task, question, answer, response, abstention=False):\n"
                          f"    {statement}\n    return '{{}} {{}} {{}}'.format(question, answer, response)\n")
        with pytest.raises(ConfigError, match=r"get_anscheck_prompt\('single-session-user', abstention=False\): "
                                              r"line 2: .* is not read \(dkilab runs nothing of the script"):
            lme.load_templates(script)
    assert not marker.exists() and __import__("os").environ["DKILAB_CACHE_DIR"] == "untouched"
