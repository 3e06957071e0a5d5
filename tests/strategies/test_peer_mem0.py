"""mem0 (mem0ai, open source) as an answering strategy: the fixtures answered through a fake OpenAI-compatible
server that follows mem0's extraction prompt, with mem0's memories shown within the matched history budget;
each user's memory is built once per store and user, from that user's messages only; every model call reaches
the served model."""
import importlib.util

import pytest

from tests.fake_openai import Server

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="pip install 'dkilab[peers]'")


@pytest.fixture
def server():
    s = Server(memory_json=True)
    yield s
    s.close()


@pytest.mark.slow
def test_the_fixtures_are_answered_from_mem0_memories_through_the_served_model(server, tmp_path):
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.runner import run_experiment

    cfg = experiment_from_dict({
        "name": "mem0", "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096},
        "defaults": {"history_budget": 512}, "datasets": [{"name": "fixtures", "limit": 2, "question_limit": 3}],
        "strategies": [{"name": "peer_mem0", "params": {"batch": 4}}], "tracing": False})
    (result,) = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    assert result.metrics["errors"] == 0 and len(result.rows) == 6
    extractions = [b for _, b in server.requests if "## New Messages" in str(b["messages"][-1]["content"])]
    users = {r["user_id"] for r in result.rows}
    assert len(users) == 2 and extractions  # built once per user: not again for the user's next questions
    prompts = [b for _, b in server.requests if "## New Messages" not in str(b["messages"][-1]["content"])]
    assert len(prompts) == 6  # one answer call per question
    from dkilab.eval.data import load_fixtures

    own = {c.user_id: {m.message_id for m in c.messages} for c in load_fixtures(limit=2)}
    for row in result.rows:  # the messages each shown memory came from: that user's own
        assert row["prediction"].startswith("echo: ") and row["recalled_ids"]
        assert set(row["recalled_ids"]) <= own[row["user_id"]]
        assert row["budget"]["history"] == 512 and row["budget"]["used"] <= 512
    # the answers hold the memories the model extracted: the fixtures' gold is in some of them
    assert result.metrics["evidence_in_context"] > 0


def test_each_users_memory_holds_only_that_users_messages(server):
    import tempfile

    from dkilab.eval.data import load_fixtures
    from dkilab.memory import MemoryStore
    from dkilab.models import load_model
    from dkilab.strategies import create_strategy

    convs = load_fixtures(limit=2)
    with tempfile.TemporaryDirectory() as d:
        store = MemoryStore.open(d)
        for c in convs:
            store.add_messages(c.messages)
        model = load_model(f"openai:fake@{server.url}", max_context=4096)
        strategy = create_strategy("peer_mem0", {"batch": 8})
        texts = {}
        for c in convs:
            mem = strategy.memory_for(store.for_user(c.user_id), model)
            texts[c.user_id] = " ".join(h["memory"] for h in mem.get_all(filters={"user_id": c.user_id})["results"])
        a, b = convs
        assert a.messages[0].content[:20] in texts[a.user_id] and a.messages[0].content[:20] not in texts[b.user_id]
        assert strategy.memory_for(store.for_user(a.user_id), model) is strategy.memory_for(store.for_user(a.user_id),
                                                                                            model)
        store.close()


def test_a_model_whose_extraction_replies_are_not_json_fails_its_user_once_never_a_silent_no_memory(tmp_path):
    """Issue 85: mem0 logs "Error parsing extraction response" and stores nothing; the cell used to finish with 0
    errors, as no_memory. Now the user's questions are error rows naming why, the memory is built once for the
    user (not again for each question), and the counts are metrics."""
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.runner import run_experiment

    server = Server()  # replies "echo: ...": no JSON
    try:
        cfg = experiment_from_dict({
            "name": "mem0-nojson", "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096},
            "max_error_rate": 1.0, "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 3}],
            "strategies": [{"name": "peer_mem0", "params": {"batch": 4}}], "tracing": False})
        (result,) = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
        extractions = [b for _, b in server.requests if "## New Messages" in str(b["messages"][-1]["content"])]
    finally:
        server.close()
    assert result.metrics["errors"] == 3 and all("ExtractionFailed" in r["error"] for r in result.rows)
    assert "no memory stored: " in result.rows[0]["error"] and "extraction replies were not the JSON" in \
        result.rows[0]["error"]
    from dkilab.eval.data import load_fixtures

    batches = -(-len(load_fixtures(limit=1)[0].messages) // 4)
    assert len(extractions) == batches  # once for the user, not once per question


def test_the_memories_stored_and_the_extraction_failures_are_metrics(server, tmp_path):
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.runner import run_experiment

    cfg = experiment_from_dict({
        "name": "mem0-counts", "model": {"spec": f"openai:fake@{server.url}", "max_context": 4096},
        "datasets": [{"name": "fixtures", "limit": 1, "question_limit": 2}],
        "strategies": [{"name": "peer_mem0", "params": {"batch": 4}}], "tracing": False})
    (result,) = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    assert result.metrics["errors"] == 0 and result.metrics["memories_stored"] > 0
    assert result.metrics["extraction_failure_rate"] == 0.0 and result.metrics["extraction_calls"] > 0
