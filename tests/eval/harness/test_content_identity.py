"""A cell's identity covers its questions' content (issue 58 item 1): a dataset file edited under the same
name and qids is a new cell, and no journal or stored-answers record answers an edited question."""
import json

import pytest
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict
from dkilab.eval.tracking.journal import Journal, question_digest
from dkilab.types import Answer, QAItem

from tests.conftest import ROOT

DIALOGUES = ROOT / "tests" / "data" / "scripted" / "dialogues.json"


def _edit_first_question(path):
    data = json.loads(path.read_text())
    q = data["conversations"][0]["questions"][0]
    q["question"], q["answer"] = "What is my neighbour called?", "Alice"  # the same qid, new content
    path.write_text(json.dumps(data))
    return q["qid"]


def _config(path, script):
    return experiment_from_dict({"name": "content", "model": {"spec": f"scripted:{script}"}, "tracing": False,
                                 "datasets": [{"name": "mydata", "path": str(path)}],
                                 "strategies": [{"name": "no_memory"}]})


def test_question_digest_follows_text_gold_evidence_and_choices():
    base = QAItem("Where?", "Paris", evidence_ids=["m1"], qid="q1")
    same = QAItem("Where?", "Paris", evidence_ids=["m1"], qid="q1", metadata={"note": "not content"})
    assert question_digest(base) == question_digest(same)
    for other in (QAItem("Where now?", "Paris", evidence_ids=["m1"], qid="q1"),
                  QAItem("Where?", "Lyon", evidence_ids=["m1"], qid="q1"),
                  QAItem("Where?", "Paris", evidence_ids=["m2"], qid="q1"),
                  QAItem("Where?", "A", evidence_ids=["m1"], qid="q1", choices={"A": "Paris", "B": "Lyon"})):
        assert question_digest(other) != question_digest(base)


def test_a_journal_record_never_answers_an_edited_question(tmp_path):
    q0, q1 = QAItem("What is my cat called?", "Pixel", qid="sc1:q1"), QAItem("When?", "Thursday", qid="sc1:q2")
    journal = Journal(tmp_path, "cfg")
    for i, item in enumerate((q0, q1)):
        journal.append(i, item, Answer(text=f"answer {i}"), 5.0)
    assert set(journal.load([(None, q0), (None, q1)])) == {0, 1}
    edited = QAItem("What is my neighbour called?", "Alice", qid="sc1:q1")
    assert set(journal.load([(None, edited), (None, q1)])) == {1}  # same index and qid, new content: asked again
    legacy = tmp_path / "cfg.1.jsonl"  # a record without a digest (or one placed by hand) is not trusted
    legacy.write_text(json.dumps({"i": 0, "qid": "sc1:q1", "wall_ms": 1, "answer": {"text": "forged"}}) + "\n")
    assert journal.load([(None, q0), (None, q1)])[0][0].text == "answer 0"


def test_an_edited_dataset_file_is_a_new_cell_not_finished_before(tmp_path, monkeypatch):
    from dkilab.eval.harness.runner import run_experiment

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data.json"
    data.write_text(DIALOGUES.read_text())
    script = tmp_path / "s.yaml"
    script.write_text('answers:\n  - match: "neighbour"\n    outputs: ["Alice"]\ndefault: "Pixel"\n')
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    quiet = dict(uri=uri, progress=False, echo=lambda *a: None)
    before = expand_cells(_config(data, script))[0].config_hash
    (first,) = run_experiment(_config(data, script), **quiet)
    qid = _edit_first_question(data)
    after_cells = expand_cells(_config(data, script))
    assert after_cells[0].config_hash != before and after_cells[0].generation_hash != expand_cells(
        _config(DIALOGUES, script))[0].generation_hash
    (second,) = run_experiment(_config(data, script), **quiet)
    assert not second.skipped
    row = next(r for r in second.rows if r["qid"] == qid)
    assert row["prediction"] == "Alice" and row["score"] == 1.0
    assert next(r for r in first.rows if r["qid"] == qid)["prediction"] == "Pixel"


def test_stored_answers_of_an_edited_question_are_refused(tmp_path):
    import mlflow
    from dkilab.eval.harness import rescore

    cell = expand_cells(_config(DIALOGUES, "oracle"))[0]
    items = [(None, QAItem("What is my cat called?", "Pixel", qid="sc1:q1"))]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'm.db'}")
    with mlflow.start_run(experiment_id=mlflow.create_experiment("stored")) as run:
        rescore.log_answers(cell, [(0, Answer(text="Pixel"), 3.0)], items, None, [], 1.0, {})
    assert rescore.read_answers(run.info.run_id, items)[0][0][1].text == "Pixel"
    edited = [(None, QAItem("What is my neighbour called?", "Alice", qid="sc1:q1"))]
    with pytest.raises(rescore.StoredAnswersError, match="run the cell again"):
        rescore.read_answers(run.info.run_id, edited)


def test_two_sqlite_stores_in_one_directory_share_no_journal_or_lock(tmp_path):
    from dkilab.eval.tracking.runstate import store_state_dir

    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert Journal.for_cell(a, "exp", "h").path != Journal.for_cell(b, "exp", "h").path
    assert store_state_dir(a, "locks") != store_state_dir(b, "locks")
    assert store_state_dir(a, "locks").parent == tmp_path / ".dkilab-locks"
