"""The fact-call path end to end with a scripted model: recall_v4 -> summaries -> retrieve_fact rounds
-> answer -> fact-call metrics in MLflow, and the scripted runs kept out of report comparisons."""
import pytest
from dkilab.eval.harness.notes import check_expectations
from dkilab.eval.views.report import read_metrics

from tests.conftest import ROOT

CONFIG = ROOT / "experiments" / "ci" / "scripted_fact_calls.yaml"


def test_fact_calls_reach_mlflow(scripted_run):
    import mlflow

    cfg, results, uri = scripted_run
    assert check_expectations(cfg, results) == []
    mlflow.set_tracking_uri(uri)
    cells = {r.info.run_name: r for r in mlflow.search_runs(experiment_names=[cfg.name], output_format="list")
             if r.data.tags.get("dkilab.kind") == "cell"}
    assert set(cells) == {"recall_v4@scripted", "native@scripted"}
    for name, run in cells.items():
        m = read_metrics(run, uri)
        assert m["fact_call_rate"] > 0 and m["valid_call_rate"] == 0.75 and m["mean_rounds"] == 2.0, (name, m)
        assert run.data.tags["dkilab.scripted"] == "1"
        protocol = "native" if name.startswith("native") else "text"
        assert run.data.tags["dkilab.fact_protocol"] == protocol
        assert run.data.tags["dkilab.formatter"] == ("native" if protocol == "native" else "generic")  # logged
        assert run.data.params["strategy.params.recall.fact_call.protocol"] == protocol
    rows = {r["qid"]: r for r in next(r for r in results if r.cell.strategy.key == "recall_v4").rows}
    cat = rows["sc1:q1"]["fact_call_log"]
    assert [(c["offset"], c["limit"], c["valid"], c["found"]) for c in cat] == [(0, 1, True, True), (1, 1, True, True)]
    assert [c["valid"] for c in rows["sc1:q2"]["fact_call_log"]] == [False]  # an id the prompt never offered
    assert len(rows["sc2:q1"]["fact_call_log"]) == 1  # the <tool_call> syntax, read under the text protocol
    assert rows["sc1:q3"]["fact_call_log"] == []


def test_native_cell_logs_the_tool_schema(scripted_run):
    import json

    import mlflow

    cfg, results, uri = scripted_run
    mlflow.set_tracking_uri(uri)
    run = next(r for r in mlflow.search_runs(experiment_names=[cfg.name], output_format="list")
               if r.info.run_name == "native@scripted")
    import yaml

    prompts = yaml.safe_load(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/prompts.yaml"))
    schema = json.loads(prompts["formatter.native.tool_schema.en"])
    assert schema["function"]["name"] == "retrieve_fact" and "trace_id" in schema["function"]["parameters"]["required"]
    assert any(k.startswith("system.") for k in prompts)


def test_report_refuses_scripted_cells_unless_asked(scripted_run):
    from dkilab.eval.views.report import ScriptedRunsError, report

    cfg, _, uri = scripted_run
    with pytest.raises(ScriptedRunsError, match="scripted model.*--allow-scripted"):
        report(cfg.name, uri)
    table, _, _ = report(cfg.name, uri, allow_scripted=True)
    assert len(table) == 2


def test_a_bad_script_names_the_file_and_key(tmp_path):
    from dkilab.config import ConfigError
    from dkilab.models import load_model

    bad = tmp_path / "s.yaml"
    bad.write_text("answers:\n  - match: x\n    output: [a]\n")
    with pytest.raises(ConfigError, match=r"s.yaml.*answers.0"):
        load_model(f"scripted:{bad}")
    with pytest.raises(ConfigError, match="does not exist"):
        load_model(f"scripted:{tmp_path / 'none.yaml'}")
