"""The methodology card on every experiment run: answer and judge models with prompt digests, data, budgets and recall
settings, model calls and tokens per question, hardware, dkilab's version and commit; read back from MLflow and
printed by `dkilab report EXPERIMENT --card`."""
import json

import mlflow
import pytest
from dkilab.cli import main as cli
from dkilab.eval.harness.experiment import load_experiment
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.views.card import CARD_FILE
from dkilab.eval.views.report import methodology

from tests.conftest import ROOT

SCRIPTED = ROOT / "experiments" / "ci" / "scripted_fact_calls.yaml"


def test_every_run_carries_its_card_and_report_prints_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run_experiment(load_experiment(SCRIPTED), uri=uri, echo=lambda *a: None, progress=False)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name("ci-scripted-fact-calls")
    parent = mlflow.search_runs([exp.experiment_id], "tags.`dkilab.kind` = 'experiment'", output_format="list")[0]
    card = mlflow.artifacts.load_dict(f"runs:/{parent.info.run_id}/{CARD_FILE}")
    assert card == methodology("ci-scripted-fact-calls", uri)
    assert card["experiment"] == "ci-scripted-fact-calls" and card["dkilab_version"] and card["commit"]
    assert card["hardware"]["cpus"] >= 1 and card["judge"] is None
    assert card["abstention_detector"]["name"] == "hybrid"
    cells = {c["cell"]: c for c in card["cells"]}
    assert set(cells) == {"recall_v4@scripted", "native@scripted"}
    v4 = cells["recall_v4@scripted"]
    assert v4["answer_model"] == "scripted:tests/data/scripted/script.yaml" and len(v4["prompts_sha1"]) == 12
    assert v4["dataset"] == {"name": "scripted", "split": "full", "conversations": None, "questions": 4.0}
    assert v4["budget"]["history_budget"] == 2048 and v4["recall"]["fact_call"]["max_rounds"] == 3
    assert v4["per_question"]["answer_model_calls"] == 2.0 and v4["per_question"]["prompt_tokens"] > 0
    assert v4["status"] == "finished"
    assert "### Methodology" in parent.data.tags["mlflow.note.content"]
    note = parent.data.tags["mlflow.note.content"]
    assert "| recall_v4@scripted | scripted:tests/data/scripted/script.yaml |" in note
    # the Overview keeps the comparison after the card
    assert "### Comparison" in mlflow.get_run(parent.info.run_id).data.tags["mlflow.note.content"]

    assert cli(["report", "ci-scripted-fact-calls", "--tracking-uri", uri, "--card"]) == 0
    out = capsys.readouterr().out
    assert "Judge: none" in out and "| native@scripted |" in out and card["commit"] in out
    assert cli(["report", "ci-scripted-fact-calls", "--tracking-uri", uri, "--card", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == card


def test_a_judge_is_on_the_card_with_its_prompt_digest():
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.views.card import methodology_card

    base = {"name": "j", "datasets": [{"name": "fixtures", "question_limit": 1}], "strategies": [{"name": "no_memory"}]}
    plain = methodology_card(experiment_from_dict(base | {"judge": {"model": "offline:smollm2"}}), [], {})
    both = methodology_card(experiment_from_dict(base | {"judge": {"model": "offline:smollm2", "abstention": True}}),
                            [], {})
    assert plain["judge"]["model"] == "offline:smollm2" and plain["judge"]["calls_per_question"] == 1
    assert both["judge"]["calls_per_question"] == 2 and both["judge"]["prompts_sha1"] != plain["judge"]["prompts_sha1"]


def test_an_unknown_experiment_or_one_without_cards_is_a_one_line_error(tmp_path):
    from dkilab.eval.views.report import UnknownExperimentError

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    mlflow.set_tracking_uri(uri)
    exp = mlflow.create_experiment("old")
    with mlflow.start_run(experiment_id=exp, tags={"dkilab.kind": "experiment"}):  # a run from before cards existed
        pass
    with pytest.raises(UnknownExperimentError,
                       match="no MLflow experiment named 'nope'.*did you mean|experiments there"):
        methodology("nope", uri)
    with pytest.raises(UnknownExperimentError, match="'old': no run has a methodology card"):
        methodology("old", uri)
