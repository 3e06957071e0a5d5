"""The documentation's examples work as written (the "one file each" examples, the recall agent's)."""
import re

from dkilab.eval.scoring import METRICS
from dkilab.strategies import STRATEGIES

from tests.conftest import ROOT


def _blocks(heading: str) -> list[str]:
    """The python blocks of the section `## heading`, wherever it lives: the README or a page under docs/."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        if f"## {heading}" in text:
            section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
            return re.findall(r"```python\n(.*?)```", section, re.S)
    raise AssertionError(f"no section {heading!r} in the README or docs/")


def test_the_readme_strategy_and_metric_examples_run(model, tmp_path, embedder):
    from dkilab.eval.data import load_fixtures
    from dkilab.eval.scoring import aggregate, score_answer, table_metrics
    from dkilab.memory import MemoryStore
    from dkilab.strategies import create_strategy

    strategy_code, _dataset_code, metric_code, *_ = _blocks("Extending: one file each")
    try:
        exec(compile(strategy_code, "README:strategy", "exec"), {})
        exec(compile(metric_code, "README:metric", "exec"), {})
        conv = load_fixtures(limit=1)[0]
        store = MemoryStore.open(tmp_path / "s", embedder=embedder)
        store.add_messages(conv.messages)
        item = conv.questions[0]
        answer = create_strategy("echo_last", {"turns": 1, "max_new_tokens": 8}).answer(
            item.question, store.for_user(conv.user_id), model, session_id=item.session_id)
        assert answer.strategy == "echo_last" and len(answer.recalled_ids) == 2 and answer.text
        row = score_answer(item, answer)
        assert row["answer_length"] == len(answer.text.split()) and "answer_length" in aggregate([row])
        assert "answer_length" in table_metrics()
        store.close()
    finally:
        STRATEGIES.remove("echo_last")
        METRICS.remove("answer_length")


def test_the_recall_signal_example_runs_and_its_signal_is_fused(store):
    from dkilab.recall import MultiSignalRecall, RecallConfig
    from dkilab.recall.signals import SIGNALS

    from tests.recall.test_levers import HISTORY

    *_, code = _blocks("Extending: one file each")
    exec(compile(code, "docs:signal", "exec"), {})
    try:
        store.add_messages(HISTORY)
        cfg = RecallConfig().with_updates({"signals.plugins": {"longest": 0.5}, "signals.fusion": "weighted"})
        result = MultiSignalRecall(cfg, None, store.for_user("alice")).recall("What did we cook?")
        longest = max(HISTORY, key=lambda m: len(m.content)).message_id
        assert next(r for r in result.ranked if r.message.message_id == longest).signals["longest"] > 0
    finally:
        SIGNALS.remove("longest")


def test_the_readme_recall_agent_example_runs(store):
    from tests.agents.conftest import ALICE, chat

    store.add_messages(chat("alice", ALICE, "a"))
    (code,) = _blocks("Agents: recall agent and semantic pointers")
    ns = {"store": store}
    exec(compile(code, "README:agents", "exec"), ns)
    out = ns["result"].output
    assert out.memory_view.active() and out.evidence and out.limits.role == "user"
