"""Session granularity (dkilab/eval/data/sessions.py): each session one memory item, the evidence mapped to
its sessions; `locomo_sessions` through the registry, `granularity: session` on any dataset of a config."""
import os
import re

import numpy as np
import pytest
import yaml
from dkilab.encoders import passages
from dkilab.encoders.embedder import Embedder
from dkilab.eval.data import by_session, load_dataset
from dkilab.eval.data.selection import select_questions
from dkilab.eval.harness.experiment import expand_cells, load_experiment

needs_data = pytest.mark.skipif(not os.environ.get("DKILAB_DATA_DIR"), reason="DKILAB_DATA_DIR not set")


def test_each_session_is_one_item_holding_its_turns_and_the_evidence_moves_to_it():
    convs = load_dataset("fixtures")
    before = [[m.message_id for m in c.messages] for c in convs]
    for conv, whole in zip(convs, by_session(convs)):
        sessions = list(dict.fromkeys(m.session_id for m in conv.messages))
        assert [m.message_id for m in whole.messages] == sessions
        for item in whole.messages:  # every turn of the session, in order, led by who said it
            turns = [m for m in conv.messages if m.session_id == item.message_id]
            assert item.content.splitlines() == [f"{m.speaker or m.role}: {m.content}" for m in turns]
        of = {m.message_id: m.session_id for m in conv.messages}
        for q, q2 in zip(conv.questions, whole.questions):
            assert q2.evidence_ids == list(dict.fromkeys(of[e] for e in q.evidence_ids))
            assert (q2.qid, q2.answer, q2.question) == (q.qid, q.answer, q.question)
    assert [[m.message_id for m in c.messages] for c in load_dataset("fixtures")] == before  # the cache untouched


def _cell(tmp_path, dataset, **extra):
    cfg = {"name": "g", "model": {"spec": "offline:smollm2", "generate": False}, "datasets": [dataset],
           "strategies": [{"name": "recall_only"}]} | extra
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return expand_cells(load_experiment(tmp_path / "c.yaml"))[0]


def test_granularity_session_in_a_config_asks_the_same_questions_of_session_items(tmp_path):
    msg = _cell(tmp_path, {"name": "fixtures"})
    ses = _cell(tmp_path, {"name": "fixtures", "granularity": "session"})
    assert msg.config_hash != ses.config_hash and ses.identity["dataset"]["granularity"] == "session"  # another cell
    (convs, items), (convs2, items2) = select_questions(msg.dataset, None), select_questions(ses.dataset, None)
    assert [q.qid for _, q in items] == [q.qid for _, q in items2]
    assert sum(len(c.messages) for c in convs2) < sum(len(c.messages) for c in convs)
    known = {m.message_id for c in convs2 for m in c.messages}
    assert all(set(q.evidence_ids) <= known for _, q in items2)


@needs_data
def test_locomo_sessions_loads_the_same_long_items_with_declared_halves(tmp_path):
    convs = load_dataset("locomo_sessions")
    assert [[m.content for m in c.messages] for c in convs] == [[m.content for m in c.messages]
                                                               for c in load_dataset("locomo_sessions")]
    tokens = Embedder("offline:minilm").count_tokens([m.content for c in convs for m in c.messages])
    assert len(tokens) == 272 and np.median(tokens) >= 400  # what its card says: median 704
    with_evidence = [q for c in convs for q in c.questions if q.evidence_ids]
    assert len(with_evidence) >= 1900
    dev_cell = _cell(tmp_path, {"name": "locomo_sessions", "split": "dev"}, purpose="tune")
    test_cell = _cell(tmp_path, {"name": "locomo_sessions", "split": "test"})
    dev = {c.conversation_id for c, _ in select_questions(dev_cell.dataset, None)[1]}
    test = {c.conversation_id for c, _ in select_questions(test_cell.dataset, None)[1]}
    assert dev == {c.conversation_id for c in convs[:5]} and test == {c.conversation_id for c in convs[5:]}


def test_datasets_show_states_the_message_lengths_against_the_encoders_window(capsys):
    from dkilab.cli import main

    assert main(["datasets", "show", "fixtures"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"message tokens \(offline:e5, window 512\): median \d+, 10th-90th percentile \d+-\d+, "
                        r"0 of 56 over the window", line), line


def test_a_cell_on_long_messages_records_its_passages_and_one_on_short_ones_keeps_its_hash(tmp_path):
    """fixtures under stock MiniLM has one message over its window (a Chinese turn of 285 tokens); under e5 none."""
    short = _cell(tmp_path, {"name": "fixtures", "languages": ["en"]}, embedder={"model": "offline:e5"})
    assert "passages" not in short.resolved["embedder"]
    long = _cell(tmp_path, {"name": "fixtures"}, embedder={"model": "offline:minilm"})
    off = _cell(tmp_path, {"name": "fixtures"}, embedder={"model": "offline:minilm", "passages": False})
    assert long.resolved["embedder"]["passages"] == passages.VERSION and off.resolved["embedder"]["passages"] is False
    assert len({long.config_hash, off.config_hash}) == 2


def test_the_oracle_reads_a_session_item_once_its_evidence_turns_are_in_the_input():
    """A session item is long; a reader needs its evidence turns, not every page (fact calls page by sentence)."""
    from dkilab.models.oracle import OracleModel
    from dkilab.prompts import ABSTAIN_PHRASE

    conv = by_session(load_dataset("fixtures"))[0]
    q = next(q for q in conv.questions if q.evidence_ids and q.answerable)
    lines = [ln for sid in q.evidence_ids for ln in q.metadata["evidence_lines"][sid]]
    oracle = OracleModel(4096)
    oracle.expect(q, conv)
    ask = {"role": "user", "content": f"Question: {q.question}"}
    assert oracle.output_for([ask]) == ABSTAIN_PHRASE["en"]
    shown = "\n".join(f'[FACT_SEGMENT trace_id="{q.evidence_ids[0]}" chunk={i}]\n{s}\n[/FACT_SEGMENT]'
                      for i, s in enumerate(re.split(r"(?<=[.!?])\s+", " ".join(lines))))
    assert oracle.output_for([{"role": "user", "content": shown + f"\nQuestion: {q.question}"}]) == q.answer
