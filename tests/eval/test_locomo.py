import os

import pytest

from dkilab.eval.datasets import DatasetNotFoundError, load_dataset, load_locomo


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
def test_retrieval_benchmark_runs_on_locomo(tmp_path, monkeypatch):
    from dkilab.bench.retrieval import run

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    cfg = tmp_path / "r.yaml"
    cfg.write_text("dataset: {name: locomo, limit: 1, categories: [1, 2, 3, 4]}\nks: [5, 10]\n"
                   "recall: {signals: {vector_threshold: 0.0, vector_top_k: 20, lexical_top_k: 20}}\n"
                   "variants: {bm25_only: {signals.vector_enabled: false}, fused: {}}\n")
    rows = run(str(cfg), question_limit=40)
    for row in rows.values():
        assert row["questions"] > 20 and 0.2 < row["recall@10"] <= 1 and row["recall@5"] <= row["recall@10"]
