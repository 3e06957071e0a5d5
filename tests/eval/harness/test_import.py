"""`dkilab import`: published predictions as cells (strategy `imported`, dkilab/eval/data/published/), on the bundled
fixtures with prediction files written here; the real GPT-4o-mini runs of the LoCoMo audit in the slow test."""
import csv
import json
import os

import pytest
from dkilab.cli import main
from dkilab.eval.data import load_dataset

FIRST = load_dataset("fixtures")[0]  # u_maya: 12 questions, some unanswerable
QS = FIRST.questions


def _write(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _records(verdicts, skip=(), **extra):
    out = []
    for k, q in enumerate(QS):
        if k in skip:
            continue
        out.append({"question_id": str(q.qid), "question": q.question,
                    "prediction": str(q.answer) if q.answerable else "I don't know.", "verdicts": verdicts(k)} | extra)
    return out


def _import(tmp_path, *files, expect=0, extra=()):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    rc = main(["import", *map(str, files), "--dataset", "fixtures", "--experiment", "imp", "--tracking-uri", uri,
               *extra])
    assert rc == expect
    return uri


def _cells(uri):
    from dkilab.eval.tracking.store_uri import read_metrics
    from dkilab.eval.views.report import experiment_runs

    return {r.info.run_name: read_metrics(r) for r in experiment_runs("imp", uri)}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Two files answering u_maya's 12 questions; the other users' 36 have no prediction (error rows, which
    `--max-error-rate 1` accepts)."""
    tmp = tmp_path_factory.mktemp("imp")
    a = _write(tmp / "a.jsonl", _records(lambda k: [True, k % 2 == 0, k % 3 == 0], model="model-a"))
    b = _write(tmp / "b.jsonl", _records(lambda k: [True, True, k % 4 != 0], model="model-b"))
    uri = f"sqlite:///{tmp / 'm.db'}"
    rc = main(["import", str(a), str(b), "--dataset", "fixtures", "--experiment", "imp", "--tracking-uri", uri,
               "--max-error-rate", "1"])
    return tmp, a, b, uri, rc


def test_published_judge_is_the_files_majority_and_every_metric_is_scored(imported, capsys):
    tmp, a, b, uri, rc = imported
    cells = _cells(uri)
    assert set(cells) == {"a@fixtures", "b@fixtures"}
    for name, verdicts in (("a", lambda k: [True, k % 2 == 0, k % 3 == 0]), ("b", lambda k: [True, True, k % 4 != 0])):
        m = cells[f"{name}@fixtures"]
        votes = [verdicts(k) for k in range(len(QS))]
        assert m["published_judge"] == pytest.approx(sum(sum(v) >= 2 for v in votes) / len(votes))
        assert m["published_judge_mean"] == pytest.approx(sum(sum(v) / 3 for v in votes) / len(votes))
        assert "published_judge_ci95_low" in m
        assert m["score"] > 0.5  # the gold as the answer, "I don't know." on the unanswerable ones
        assert m["hallucination_rate"] == 0.0  # every unanswerable one declined
        assert m["imported_predictions"] == len(QS) and m["imported_unmatched"] == 0
        # the other three users' questions are not answered by the files: error rows, counted, not dropped
        assert m["imported_missing"] == m["errors"] == 36
        assert "prompt_tokens" not in m and "unsupported_claim_rate" not in m  # not known for a published reply


def test_imported_cells_report_paired_differences_and_their_source(imported, capsys):
    tmp, a, b, uri, _ = imported
    assert main(["report", "imp", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "published_judge" in out and "paired differences" in out
    line = next(x for x in out.splitlines() if "published_judge" in x and "a@fixtures" in x and "b@fixtures" in x)
    assert " 12 " in line  # on the same 12 questions
    assert main(["report", "imp", "--tracking-uri", uri, "--card"]) == 0
    card = capsys.readouterr().out
    assert str(a) in card and str(b) in card and "model-a" in card and "model-b" in card


def test_a_rerun_skips_the_same_file_and_an_edited_file_is_another_cell(imported, capsys, tmp_path):
    tmp, a, b, uri, _ = imported
    assert main(["import", str(a), "--dataset", "fixtures", "--experiment", "imp", "--tracking-uri", uri,
                 "--max-error-rate", "1"]) == 0
    assert "finished before" in capsys.readouterr().out
    edited = _write(tmp_path / "a.jsonl", _records(lambda k: [False, False, False], model="model-a"))
    assert main(["import", str(edited), "--dataset", "fixtures", "--experiment", "imp", "--tracking-uri", uri,
                 "--max-error-rate", "1"]) == 0
    out = capsys.readouterr().out
    assert "finished before" not in out and "imported" in out


def test_rescore_and_report_of_an_imported_cell_load_no_model(imported, capsys, monkeypatch):
    from dkilab.models import loading

    tmp, a, b, uri, _ = imported

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    before = loading.loaded_keys()  # what other tests on this worker loaded stays as it was
    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.setattr(loading, "load_tokenizer_model", refuse)
    assert main(["rescore", "imp", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "re-scored from the answers" in out
    assert main(["report", "imp", "--tracking-uri", uri]) == 0
    assert loading.loaded_keys() == before  # nothing loaded, not even a tokenizer


def test_a_question_text_that_differs_refuses_the_import_naming_the_id(tmp_path, capsys):
    recs = _records(lambda k: [True])
    recs[1]["question"] = "What colour is my dog?"
    f = _write(tmp_path / "p.jsonl", recs)
    _import(tmp_path, f, expect=2)
    err = capsys.readouterr().err
    assert "u_maya:q1" in err and "What colour is my dog?" in err and "not imported" in err
    from dkilab.eval.views.report import experiment_runs

    with pytest.raises(Exception):  # nothing was logged: the experiment does not exist
        experiment_runs("imp", f"sqlite:///{tmp_path / 'm.db'}")


def test_unmatched_predictions_are_counted_and_missing_questions_fail_the_cell(tmp_path, capsys):
    recs = _records(lambda k: [True], skip=(3,))
    recs.append({"question_id": "u_nobody:q9", "prediction": "x"})
    f = _write(tmp_path / "p.jsonl", recs)
    uri = _import(tmp_path, f, expect=1, extra=["--categories", "single_hop,unanswerable,preference_update"])
    out = capsys.readouterr()
    assert "1 to no question of the dataset (e.g. u_nobody:q9)" in out.out
    assert "FAILED" in out.out + out.err
    runs = _cells(uri)
    assert not runs  # a failed cell is not a finished one


def test_csv_by_question_text_and_an_ambiguous_text_is_refused(tmp_path, capsys):
    path = tmp_path / "p.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["question", "answer", "verdict"])
        w.writeheader()
        for k, q in enumerate(QS):
            w.writerow({"question": q.question, "answer": str(q.answer), "verdict": "CORRECT" if k else "WRONG"})
    from dkilab.eval.data.published import match, read_run

    run = read_run(path)
    assert run.format == "csv" and run.predictions[0].verdicts == (False,)
    convs = load_dataset("fixtures")
    found = match(run, "fixtures", convs, [(FIRST, q) for q in QS])
    assert len(found.by_index) == len(QS) and not found.missing and not found.unmatched
    twice = load_dataset("fixtures")[:1] * 2  # the same conversation twice: every text is asked twice
    with pytest.raises(ValueError, match="asked 2 times"):
        match(run, "fixtures", twice, [(FIRST, q) for q in QS])


def test_two_predictions_for_one_question_and_bad_verdicts_are_refused(tmp_path):
    from dkilab.eval.data.published import PredictionsError, match, read_run

    recs = _records(lambda k: [True])
    recs.append(dict(recs[0]))
    with pytest.raises(PredictionsError, match="both answer u_maya:q0"):
        match(read_run(_write(tmp_path / "p.jsonl", recs)), "fixtures", load_dataset("fixtures"),
              [(FIRST, q) for q in QS])
    with pytest.raises(PredictionsError, match=r"line 1.*verdict 'maybe'"):
        read_run(_write(tmp_path / "q.jsonl", [{"qid": "u_maya:q0", "prediction": "x", "verdict": "maybe"}]))
    with pytest.raises(PredictionsError, match="no predictions reader"):
        read_run(_write(tmp_path / "q.txt", []))


AUDIT = os.path.join(os.environ.get("DKILAB_DATA_DIR", "/nonexistent"), "locomo_audit", "fc-baseline")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(AUDIT), reason="needs the LoCoMo audit under $DKILAB_DATA_DIR")
def test_the_real_gpt4o_mini_runs_import_to_the_files_majority_accuracy(tmp_path, capsys):
    files = [os.path.join(AUDIT, f"gpt-4o-mini-{p}", "eval_results.json") for p in ("memos", "cot")]
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["import", *files, "--dataset", "locomo", "--experiment", "imp", "--tracking-uri", uri]) == 0
    cells = _cells(uri)
    memos, cot = cells["gpt-4o-mini-memos@locomo"], cells["gpt-4o-mini-cot@locomo"]
    assert memos["questions"] == cot["questions"] == 1540 and memos["errors"] == cot["errors"] == 0
    assert round(100 * memos["published_judge"], 2) == 74.35 and round(100 * cot["published_judge"], 2) == 79.94
    assert main(["report", "imp", "--tracking-uri", uri]) == 0
    assert "published_judge 1540" in " ".join(capsys.readouterr().out.split())
