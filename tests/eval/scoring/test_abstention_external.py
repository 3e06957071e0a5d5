"""Issue 33: the check on replies written by other people reads the datasets at run time, joins them with
hand labels that hold no text, and refuses labels of another text (tiny hand-made datasets here)."""
import json

import pytest
from dkilab.bench import abstention_external as ext


def _data(tmp_path, reply="这个我就不清楚了。"):
    kd = tmp_path / "kdconv"
    kd.mkdir(parents=True, exist_ok=True)
    dialogue = {"messages": [{"message": "你知道导演是谁吗？"}, {"message": reply},
                             {"message": "那门票要钱吗？"}, {"message": "不需要，免费开放。"},
                             {"message": "好的。"}, {"message": "不客气，玩得开心。"}]}  # no question before: not taken
    for domain in ("film", "music"):
        (kd / f"{domain}_test.json").write_text(json.dumps([dialogue], ensure_ascii=False), encoding="utf-8")
    lo = tmp_path / "locomo"
    lo.mkdir(exist_ok=True)
    conv = {"speaker_a": "A", "speaker_b": "B", "session_1": [
        {"speaker": "A", "text": "Have you ever tried pottery?"}, {"speaker": "B",
                                                                   "text": "No, I haven't tried it yet."},
        {"speaker": "A", "text": "Do you know who painted it?"}, {"speaker": "B", "text": "Sorry, I don't know."}]}
    (lo / "locomo10.json").write_text(json.dumps([{"conversation": conv}] * 6), encoding="utf-8")
    return tmp_path


def _labels(tmp_path, data, override=None):
    gold = {"这个我就不清楚了。": "abstain", "不需要，免费开放。": "answer", "No, I haven't tried it yet.": "answer",
            "Sorry, I don't know.": "abstain"}
    path = tmp_path / "labels.jsonl"
    rows = [{"key": r["key"], "sha1": ext.digest(r["text"]), "label": gold.get(r["text"], "answer")}
            for r in ext.candidates(data)]
    for key, value in (override or {}).items():
        rows = [{**r, **value} if r["key"] == key else r for r in rows]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_replies_to_questions_are_taken_and_split_into_a_dev_and_a_held_out_part(tmp_path):
    data = _data(tmp_path / "d")
    rows = ext.candidates(data)
    keys = {r["key"] for r in rows}
    assert "kdconv:film:0:1" in keys and "kdconv:film:0:3" in keys  # "不需要" after a question: a hard negative
    assert "kdconv:film:0:5" not in keys  # a reply to "好的。" answers no question
    assert {r["part"] for r in rows if r["key"].startswith("kdconv:film")} == {"dev"}
    assert {r["part"] for r in rows if r["key"].startswith("kdconv:music")} == {"held-out"}
    assert {r["part"] for r in rows if r["key"].startswith("locomo:0:")} == {"dev"}
    assert {r["part"] for r in rows if r["key"].startswith("locomo:5:")} == {"held-out"}
    labels = ext.load(data, _labels(tmp_path, data))
    assert {r["label"] for r in labels} == {"abstain", "answer"}


def test_figures_count_precision_and_recall_per_part_and_language(tmp_path):
    data = _data(tmp_path / "d")
    rows = ext.load(data, _labels(tmp_path, data))
    says_no = ext.figures(lambda t: "不" in t or "n't" in t, rows)  # calls every negation an abstention
    assert says_no["dev"]["zh"]["recall"] == 1.0 and says_no["dev"]["zh"]["precision"] == 0.5
    assert says_no["held-out"]["en"]["precision"] == 0.5 and len(says_no["held-out"]["en"]["errors"]) == 1
    exact = ext.figures(lambda t: t in ("这个我就不清楚了。", "Sorry, I don't know."), rows)
    assert all(m["precision"] == m["recall"] == 1.0 and not m["errors"] for by in exact.values() for m in by.values())


def test_labels_of_another_text_a_missing_label_or_an_unknown_kind_are_errors_naming_the_key(tmp_path):
    data = _data(tmp_path / "d")
    labels = _labels(tmp_path, data)
    changed = _data(tmp_path / "d", reply="这个我不知道，是张艺谋吗？")  # the dataset's text changed under the labels
    with pytest.raises(ValueError, match="kdconv:film:0:1.*differs"):
        ext.load(changed, labels)
    lines = labels.read_text(encoding="utf-8").splitlines()
    (tmp_path / "short.jsonl").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no label for kdconv:film:0:1"):
        ext.load(changed, tmp_path / "short.jsonl")
    data = _data(tmp_path / "d")
    (data / "locomo" / "locomo10.json").unlink()  # a dataset file missing: its labels have no reply
    with pytest.raises(ValueError, match="not in .*first: locomo:0:session_1:1"):
        ext.load(data, labels)
    data = _data(tmp_path / "d")
    with pytest.raises(ValueError, match=r"labels\.jsonl:1: label 'maybe' of kdconv:film:0:1"):
        ext.load(data, _labels(tmp_path, data, {"kdconv:film:0:1": {"label": "maybe"}}))


@pytest.mark.skipif(not __import__("os").environ.get("DKILAB_DATA_DIR"), reason="DKILAB_DATA_DIR not set")
def test_the_shipped_labels_fit_the_datasets_and_hold_no_text():
    import os

    rows = ext.load(os.environ["DKILAB_DATA_DIR"])
    assert len(rows) == len(ext.load_labels()) >= 450
    assert {(r["lang"], r["part"]) for r in rows} == {("en", "dev"), ("en", "held-out"), ("zh", "dev"),
                                                      ("zh", "held-out")}
    assert sum(r["label"] == "abstain" and r["lang"] == "zh" for r in rows) >= 50
    shipped = ext.LABELS.read_text(encoding="utf-8")
    assert not [r["key"] for r in rows if len(r["text"]) > 8 and r["text"][:8] in shipped]  # keys, digests, labels only


def test_the_external_check_without_a_data_dir_is_an_error_not_a_skip(monkeypatch, capsys):
    from dkilab.bench import abstention as bench
    from dkilab.text.abstention.learned import get_detector

    monkeypatch.delenv("DKILAB_DATA_DIR", raising=False)
    assert bench._external(get_detector("hybrid"), get_detector("structural"), None, False) is False
    assert "no data dir" in capsys.readouterr().err


def test_a_second_reader_labels_a_blind_sheet_and_the_agreement_is_counted(tmp_path, capsys, monkeypatch):
    from dkilab.cli import main

    data = _data(tmp_path / "d")
    sheet = tmp_path / "sheet.jsonl"
    monkeypatch.setattr(ext, "LABELS", _labels(tmp_path, data))  # the first reader's labels of the tiny datasets
    # a data dir without a reply the first labels cover writes no sheet: a partial sheet is no second reading
    assert main(["bench", "abstention", "--label-sheet", str(sheet), "--data-dir", str(tmp_path / "empty")]) == 2
    assert "first: kdconv:film:0:1" in capsys.readouterr().err and not sheet.exists()
    real_write = ext.Path.write_text

    def interrupted(self, text, *a, **k):  # Ctrl-C halfway through writing the file
        real_write(self, text[:len(text) // 2], *a, **k)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(ext.Path, "write_text", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ext.label_sheet(data, sheet)
    assert not sheet.exists()  # no half sheet under the name a reader would open
    assert main(["bench", "abstention", "--label-sheet", str(sheet), "--data-dir", str(data)]) == 0
    before = sheet.read_text(encoding="utf-8")  # asked again, a filled sheet is never overwritten
    assert main(["bench", "abstention", "--label-sheet", str(sheet), "--data-dir", str(data)]) == 2
    assert "exists" in capsys.readouterr().err and sheet.read_text(encoding="utf-8") == before
    rows = [json.loads(line) for line in sheet.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(ext.candidates(data)) and {r["label"] for r in rows} == {""}  # blind: no first labels
    assert all(r["question"] and r["text"] and r["sha1"] == ext.digest(r["text"]) for r in rows)
    with pytest.raises(ValueError, match=r"sheet\.jsonl:1: label '' of "):  # a sheet not filled in is no label file
        ext.load(data, sheet)
    from dkilab.bench import abstention as bench
    from dkilab.text.abstention.learned import get_detector

    capsys.readouterr()
    assert not bench._external(get_detector("hybrid"), get_detector("structural"), str(data), False, str(sheet))
    assert "sheet.jsonl:1: label '' of" in capsys.readouterr().err  # the bench says so and exits 2, no traceback
    # the sheet holds dataset text: never written inside the project
    assert main(["bench", "abstention", "--label-sheet", str(ext.ROOT / "sheet.jsonl"), "--data-dir", str(data)]) == 2
    assert "holds dataset text" in capsys.readouterr().err and not (ext.ROOT / "sheet.jsonl").exists()

    first = ext.load(data, _labels(tmp_path, data))
    flip = next(r["key"] for r in first if r["text"] == "Sorry, I don't know.")  # the second reader disagrees once
    filled = [{**r, "label": "pivot" if r["key"] == flip else next(f["label"] for f in first if f["key"] == r["key"])}
              for r in rows]
    sheet.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in filled), encoding="utf-8")
    second = ext.load(data, sheet)
    a = ext.agreement(first, second)
    n = len(first)
    assert a["all"]["n"] == n and a["all"]["agree"] == pytest.approx((n - 1) / n)
    assert a["all"]["confusion"] == {"abstain->pivot": 1} and 0 < a["all"]["kappa"] < 1
    assert a["all"]["n_binary"] == n - 1 and a["all"]["kappa_binary"] == pytest.approx(1.0)
    same = ext.agreement(first, first)
    assert same["all"]["agree"] == 1.0 and same["all"]["kappa"] == pytest.approx(1.0) and not same["all"]["confusion"]
    # the bench prints both readers' agreement and the detector's figures under the second reader's labels
    assert bench._external(get_detector("hybrid"), get_detector("structural"), str(data), False, str(sheet))
    out = capsys.readouterr().out
    assert f"all      n={n:3d}  agreement {(n - 1) / n:.3f}" in out and "abstain->pivot 1" in out
    assert "held-out en, second reader's labels: precision" in out
