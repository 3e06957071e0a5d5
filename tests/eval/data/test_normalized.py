"""The normalised dialogue format, the Hugging Face cache behind every loader, and the LoCoMo variants
the loader tolerates (all on our own small files)."""
import json
import shutil

import pytest
from dkilab.eval.data import DatasetNotFoundError, load_dataset
from dkilab.eval.data.normalized import as_hf_dataset, features, from_records, read_normalized

from tests.conftest import ROOT

EXAMPLE = ROOT / "datasets" / "fixtures" / "normalized_example.jsonl"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))


def test_the_example_file_loads_with_defaults_filled_in(tmp_path):
    ana, wei = load_dataset("example", data_dir=str(tmp_path), path=str(EXAMPLE))
    assert (ana.language, wei.language) == ("en", "cn") and ana.speakers["user"] == "Ana"
    assert [m.turn_id for m in ana.messages] == [0, 1, 2, 3, 4] and ana.messages[0].speaker == "Ana"
    assert ana.messages[3].timestamp.isoformat() == "2025-10-11T09:30:00+00:00"  # "2025-10-11 09:30"
    assert wei.messages[0].timestamp.isoformat() == "2025-10-02T02:00:00+00:00"  # epoch seconds
    assert wei.messages[2].timestamp.isoformat() == "2025-10-20T12:00:00+00:00"  # +08:00 -> UTC
    assert [q.answerable for q in ana.questions] == [True, True, True, False]  # answer: null
    assert ana.questions[0].evidence_ids == ["nx_ana:1"] and ana.questions[0].qid == "nx_ana:q1"
    limited = load_dataset("example", data_dir=str(tmp_path), path=str(EXAMPLE), limit=1, question_limit=2)
    assert len(limited) == 1 and len(limited[0].questions) == 2


def test_records_round_trip_through_the_declared_features():
    convs = read_normalized(EXAMPLE) + load_dataset("fixtures", limit=1)
    ds = as_hf_dataset(convs)
    assert ds.features == features() and len(ds) == 3
    back = from_records(ds)
    assert [c.messages for c in back] == [c.messages for c in convs]
    assert [c.questions for c in back] == [c.questions for c in convs]  # choices, categories, dates, metadata


def test_jsonl_json_and_parquet_give_the_same_conversations(tmp_path):
    import pandas as pd

    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    (tmp_path / "a.json").write_text(json.dumps({"conversations": rows}, ensure_ascii=False), encoding="utf-8")
    for r in rows:  # Parquet wants one type per column
        for m in r["messages"]:
            m["timestamp"] = str(m["timestamp"])
    pd.DataFrame(rows).to_parquet(tmp_path / "a.parquet")
    want = read_normalized(EXAMPLE)
    assert read_normalized(tmp_path / "a.json") == want
    got = read_normalized(tmp_path / "a.parquet")
    assert [c.messages for c in got] == [c.messages for c in want] and [c.questions for c in got] == [c.questions
                                                                                                      for c in want]


def test_bad_files_name_the_file_the_record_and_the_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversation_id": "c1", "messages": [{"timestamp": "2025-01-01"}]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl: conversation 0 \(c1\): messages\.0\.content: Field required"):
        read_normalized(bad)
    bad.write_text('{"conversation_id": "c1", "messages": [{"content": "hi", "timestamp": "soon-ish"}]}\n')
    with pytest.raises(ValueError, match=r"messages\.0\.timestamp: .*unrecognised date/time 'soon-ish'"):
        read_normalized(bad)
    bad.write_text('{"conversation_id": "c1", "messages": [{"content": "hi", "timestamp": 0}], '
                   '"questions": [{"question": "?", "evidence_ids": ["nope"]}]}\n')
    with pytest.raises(ValueError, match=r"conversation 0 \(c1\) question 0: evidence \['nope'\] names no message"):
        read_normalized(bad)
    bad.write_text('{"conversation_id": "c1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        read_normalized(bad)
    with pytest.raises(DatasetNotFoundError, match=r"missing\.jsonl not found"):
        load_dataset("x", data_dir=str(tmp_path), path="missing.jsonl")


def test_loads_are_cached_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    import dkilab.eval.data.normalized as normalized

    src = tmp_path / "data.jsonl"
    shutil.copy(EXAMPLE, src)
    first = load_dataset("x", path=str(src))
    monkeypatch.setattr(normalized, "read_normalized", lambda path: pytest.fail("read the source again"))
    assert load_dataset("x", path=str(src)) == first  # from the Arrow cache
    (cached,) = (tmp_path / "cache" / "datasets").glob("file-data-*")
    for f in cached.glob("*.arrow"):
        f.write_bytes(b"garbage")
    monkeypatch.undo()
    assert load_dataset("x", path=str(src)) == first  # damaged: rebuilt from the source
    src.write_text(src.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert len(load_dataset("x", path=str(src))) == 1  # a changed source is a new fingerprint


LOCOMO_VARIANT = [{
    "sample_id": "v1",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "2023-05-08 13:56",          # ISO-ish instead of '1:56 pm on 8 May, 2023'
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "clean_text": "I got a kitten called Miso."},
            {"speaker": "Ben", "dia_id": "D1:2", "content": "Cute! What colour is she?"},
            {"speaker": "Ana", "dia_id": "D1:3", "img_url": ["http://x/1.jpg"]},           # image only
            {"speaker": "Ana", "dia_id": "D1:4", "text": "Here she is", "blip_caption": "a grey kitten on a sofa"},
        ],
        "session_2_date_time": "May 20, 2023",
        "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "utterance": "How is Miso?"},
                      {"speaker": "Ana", "dia_id": "D2:2", "text": "Growing fast."}],
    },
    "qa": [{"question": "What is the kitten called?", "answer": "Miso", "evidence": ["D1:1-D1:3"], "category": 4},
           {"question": "How is the kitten?", "answer": "Growing fast", "evidence": ["D2:1; D2:2"], "category": 4},
           {"question": "What did Ana show?", "answer": "a photo", "evidence": ["D:1:4"], "category": 1},
           {"question": "Where does Ben live?", "adversarial_answer": "Oslo", "evidence": [], "category": 5}],
}]


def test_the_locomo_loader_tolerates_the_variants_of_locomo_style_releases(tmp_path):
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text(json.dumps(LOCOMO_VARIANT), encoding="utf-8")
    (conv,) = load_dataset("locomo", data_dir=str(tmp_path))
    texts = [m.content for m in conv.messages]
    assert texts == ["I got a kitten called Miso.", "Cute! What colour is she?", "[shares a photo]",
                     "Here she is [shares a photo: a grey kitten on a sofa]", "How is Miso?", "Growing fast."]
    assert conv.messages[0].timestamp.isoformat() == "2023-05-08T13:56:00+00:00"
    assert conv.messages[4].timestamp.date().isoformat() == "2023-05-20"
    q = conv.questions
    assert q[0].evidence_ids == ["v1:D1:1", "v1:D1:2", "v1:D1:3"]  # a range
    assert q[1].evidence_ids == ["v1:D2:1", "v1:D2:2"] and q[2].evidence_ids == ["v1:D1:4"]  # a list, a stray colon
    assert not q[3].answerable and q[3].metadata["adversarial_answer"] == "Oslo"
