import os

import pytest
from dkilab.eval.data import DatasetNotFoundError, load_dataset, load_locomo


def test_missing_dataset_names_path_and_source(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"locomo10\.json.*snap-research/locomo"):
        load_locomo(str(tmp_path))
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("nope", data_dir=str(tmp_path))


needs_data = pytest.mark.skipif(not os.environ.get("DKILAB_DATA_DIR"), reason="DKILAB_DATA_DIR not set")


@pytest.mark.slow
@needs_data
def test_locomo_loader_matches_the_dataset_card():
    convs = load_locomo()
    assert len(convs) == 10 and sum(len(c.messages) for c in convs) == 5882
    assert len({m.session_id for c in convs for m in c.messages}) == 272
    qs = [q for c in convs for q in c.questions]
    assert len(qs) == 1986 and sum(not q.answerable for q in qs) == 446
    assert all(q.answer is None for q in qs if not q.answerable)
    known = {m.message_id for c in convs for m in c.messages}
    assert all(e in known for q in qs for e in q.evidence_ids)
    first = convs[0]
    assert first.speakers == {"user": "Caroline", "assistant": "Melanie"}
    assert first.messages[0].message_id == "conv-26:D1:1" and first.questions[0].evidence_ids == ["conv-26:D1:3"]


@pytest.mark.slow
@needs_data
def test_retrieval_experiment_logs_recall_at_k_to_mlflow(tmp_path, monkeypatch):
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.eval.views.report import report

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    cfg = load_experiment("experiments/retrieval_locomo.yaml",
                          {"datasets.0.limit": 1, "datasets.0.question_limit": 40})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    results = run_experiment(cfg, uri=uri, progress=False, echo=lambda *_: None)
    by = {r.cell.strategy.key: r.metrics for r in results}
    assert set(by) == {"dense_only", "bm25_only", "rrf_plain", "fused"}
    for m in by.values():
        assert m["questions"] >= 30 and m["errors"] == 0 and "score" not in m
        assert 0.2 < m["recall_at_10"] <= 1 and m["recall_at_5"] <= m["recall_at_10"] <= m["recall_at_20"]
    assert by["fused"]["recall_at_10"] > max(by["dense_only"]["recall_at_10"], by["bm25_only"]["recall_at_10"])
    table, pairs, notes = report("retrieval_locomo", uri)
    assert {"recall_at_10", "mrr", "latency_recall_p50_ms"} <= set(table.columns) and "score" not in table.columns
    assert set(pairs["metric"]) == {"recall_at_10"} and len(pairs) == 6 and not notes  # 4 cells: 6 pairs
