"""Issue 29: `dkilab gpu`, proven on CPU: the one-line refusal without CUDA, every problem found before a
model loads, the plan from measured throughput (finished cells left out), and the whole path (smoke
stage, runs, report folder) under --cpu."""
import json
from pathlib import Path

import pytest
import yaml
from dkilab.cli import main

from tests.conftest import ROOT

CONFIG = str(ROOT / "experiments" / "ci" / "gpu_path.yaml")


def test_without_cuda_it_says_so_in_one_line(capsys):
    assert main(["gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dkilab gpu: no CUDA device here") and "--cpu" in err[0]


def test_every_problem_is_named_before_a_model_loads(tmp_path, monkeypatch, capsys):
    import dkilab.models.loading as loading

    def no_load(*a, **k):
        raise AssertionError("a model loaded before the checks passed")

    monkeypatch.setattr(loading, "_load_hf", no_load)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DKILAB_MODEL_ROOT", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty hub cache
    cfg = yaml.safe_load(Path(CONFIG).read_text()) | {
        "name": "gpu-problems", "model": {"spec": "someorg/not-here-7b", "device": "auto"},
        "datasets": [{"name": "locomo", "split": "test"}], "judge": {"model": "openai:judge@http://127.0.0.1:9/v1"}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = main(["gpu", "--cpu", str(path), "--data-dir", str(tmp_path / "no-data"), "--report-dir",
                 str(tmp_path / "r"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    out = capsys.readouterr()
    assert code == 1 and "problem(s) before anything ran" in out.err
    problems = [ln for ln in out.out.splitlines() if "PROBLEM" in ln]
    assert any("dataset locomo" in p and "no-data" in p for p in problems), problems
    assert any("someorg/not-here-7b" in p and "HF_HUB_OFFLINE=1" in p and "DKILAB_MODEL_ROOT" in p for p in problems)
    assert any("judge.model" in p and "GET /models" in p for p in problems)
    assert not (tmp_path / "r").exists()  # nothing written either


def test_a_hub_id_under_the_model_root_loads_from_there(tmp_path, monkeypatch):
    from dkilab.gpu.preflight import check_weights
    from dkilab.models.loading import resolve_spec

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("DKILAB_MODEL_ROOT", str(tmp_path / "models"))
    assert "not in the Hugging Face cache" in check_weights("Qwen/Qwen2.5-7B-Instruct")
    (tmp_path / "models" / "Qwen" / "Qwen2.5-7B-Instruct").mkdir(parents=True)
    (tmp_path / "models" / "Qwen" / "Qwen2.5-7B-Instruct" / "config.json").write_text("{}")
    assert check_weights("Qwen/Qwen2.5-7B-Instruct") is None
    assert resolve_spec("Qwen/Qwen2.5-7B-Instruct") == str(tmp_path / "models" / "Qwen" / "Qwen2.5-7B-Instruct")


def test_a_served_model_is_checked_at_its_endpoint(fake_server):
    from dkilab.gpu.preflight import check_weights

    url = fake_server
    assert check_weights(f"openai:fake@{url}") is None
    assert "not 'other'" in check_weights(f"openai:other@{url}")


@pytest.mark.slow
def test_the_whole_path_on_cpu_smoke_plan_runs_and_one_report_folder(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = tmp_path / "report"
    assert main(["gpu", "--cpu", CONFIG, "--report-dir", str(report), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    smoke = json.loads((report / "smoke.json").read_text())
    assert [r["check"] for r in smoke] == ["kv", "batched", "judge", "accelerate"] and all(r["ok"]
                                                                                           for r in smoke), smoke
    assert "architectures exact and continuous" in smoke[0]["detail"] and "each process judged" in smoke[3]["detail"]
    plan = json.loads((report / "plan.json").read_text())
    assert plan == [{**plan[0], "config": CONFIG, "cells": 2, "finished_before": 0,
                     "questions": 8}] and plan[0]["estimate_s"] > 0
    assert "prefill" in out and "decode" in out  # measured, not assumed
    folder = report / "ci-gpu-path"
    table = (folder / "table.md").read_text()
    assert "full_history" in table and "full_attention" in table
    assert (folder / "comparison.png").stat().st_size > 0
    csv = (folder / "table.csv").read_text().splitlines()
    assert [ln.split(",")[0] for ln in csv[1:3]] == ["full_history@fixtures", "full_attention@fixtures"]
    assert "full_history@fixtures,full_attention@fixtures,score" in (folder / "table.csv").read_text()  # paired
    assert "ci-gpu-path/table.md" in (report / "index.md").read_text()
    # a rerun: the plan sees both cells finished and nothing to ask; nothing runs again
    assert main(["gpu", "--cpu", CONFIG, "--skip-smoke", "--plan-only", "--report-dir", str(report / "again"),
                 "--tracking-uri", uri]) == 0
    again = json.loads((report / "again" / "plan.json").read_text())
    assert again[0]["finished_before"] == 2 and again[0]["questions"] == 0 and again[0]["estimate_s"] == 0


@pytest.fixture
def fake_server():
    from tests.fake_openai import Server

    s = Server(models=("fake",))
    yield s.url
    s.close()


def test_a_served_model_takes_native_fact_calls_and_counts_budgets_with_its_own_tokenizer(tmp_path):
    """The served path (vLLM / SGLang with a tool-call parser), against a local fake that calls
    retrieve_fact through `tool_calls` and answers after the tool's result: the calls are parsed and
    followed, and the token budgets are the served model's tokens (`model.tokenizer`), not the heuristic."""
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.models.loading import load_model, resolve_spec

    from tests.fake_openai import Server

    server = Server(call_then_answer=True, models=("served",))
    tokenizer = resolve_spec("offline:smollm2")  # a local tokenizer directory stands in for Qwen's
    try:
        spec = f"openai:served@{server.url}"
        served = load_model(spec, tokenizer=tokenizer)
        text = "Caroline went to the LGBTQ support group on 7 May 2023 and felt accepted."
        assert served.count_tokens(text) == len(served.tokenizer(text, add_special_tokens=False)["input_ids"])
        assert served.count_tokens(text) != load_model(spec).count_tokens(text)  # the heuristic differs
        cfg = {"name": "served", "tracing": False, "defaults": {"max_new_tokens": 8, "history_budget": 2048},
               "model": {"spec": spec, "tokenizer": tokenizer, "max_context": 4096, "concurrency": 2},
               "datasets": [{"name": "scripted", "path": str(ROOT / "tests" / "data" / "scripted" / "dialogues.json")}],
               "strategies": [{"name": "recall_v4", "params": {"recall": {
                   "summary": {"per_message_threshold": 10},
                   "fact_call": {"protocol": "native", "max_rounds": 1, "max_fact_tokens": 400}}}}]}
        path = tmp_path / "served.yaml"
        path.write_text(yaml.safe_dump(cfg))
        [res] = run_experiment(load_experiment(path), uri=f"sqlite:///{tmp_path / 'mlflow.db'}", progress=False,
                               echo=lambda _: None)
        assert res.status == "finished", (res.error, [r.get("error") for r in res.rows][:1])
        assert res.cell.resolved["model"]["tokenizer"] == tokenizer  # in the cell's identity
        called = [r for r in res.rows if r["fact_calls"]]
        assert called and all(r["valid_calls"] == r["fact_calls"] for r in called)
        sent = [b for _, b in server.requests]
        assert any(b.get("tools") and b["tools"][0]["function"]["name"] == "retrieve_fact" for b in sent)
        assert any(m["role"] == "tool" and "FACT_SEGMENT" in m["content"] for b in sent for m in b["messages"])
        assert all(0 < r["history_tokens"] <= r["history_budget"] for r in res.rows)
    finally:
        server.close()


def test_throughput_is_measured_on_a_served_model_with_or_without_its_tokenizer(fake_server):
    from dkilab.gpu.plan import measure
    from dkilab.models.loading import load_model, resolve_spec

    for kw in ({}, {"tokenizer": resolve_spec("offline:smollm2")}):
        tp = measure(load_model(f"openai:fake@{fake_server}", **kw), prompt_tokens=64, new_tokens=4)
        assert tp.prefill_tok_s > 0 and tp.decode_tok_s > 0 and tp.batch == 1
