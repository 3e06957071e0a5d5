"""Issue 59: the declared language picks the store's encoder, for a file in the normalised format as for a
registered dataset, and a store build of thousands of messages shows its progress."""
import json
from pathlib import Path

import pytest
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

EXAMPLE = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "normalized_example.jsonl"


def _records(language: str | None, text: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()][:1]
    for r in rows:  # the example's English conversation
        if language is None:
            r.pop("language", None)
        else:
            r["language"] = language
        if text is not None:
            for m in r["messages"]:
                m["content"] = text
    return rows


def _embedder(tmp_path, rows, **spec) -> str:
    f = tmp_path / "data.jsonl"
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    cfg = experiment_from_dict({"name": "lang", "model": {"spec": "offline:smollm2", "generate": False},
                                "datasets": [{"name": "mine", "path": str(f)} | spec],
                                "strategies": [{"name": "recall_v4",
                                                "params": {"recall": {"fact_call": {"enabled": False}}}}]})
    (cell,) = expand_cells(cfg)
    return cell.embedder.model


def test_a_normalised_english_file_gets_the_english_encoder_without_naming_one(tmp_path):
    assert _embedder(tmp_path, _records("en")) == "offline:minilm-locomo"
    # records saying `auto` (or nothing) are detected from their text once, when the file is read
    assert _embedder(tmp_path, _records("auto")) == "offline:minilm-locomo"
    assert _embedder(tmp_path, _records(None)) == "offline:minilm-locomo"
    assert _embedder(tmp_path, _records("auto", text="我上周二开始跟老师学大提琴了。")) == "offline:e5"
    assert _embedder(tmp_path, _records("cn")) == "offline:e5"
    both = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert {r["language"] for r in both} == {"en", "zh"}
    assert _embedder(tmp_path, both) == "offline:e5"  # mixed data: the multilingual encoder
    # `language:` on the dataset spec decides where the file does not say
    assert _embedder(tmp_path, _records("auto", text="我上周二开始跟老师学大提琴了。"),
                     language="en") == "offline:minilm-locomo"


def test_the_language_key_is_refused_when_unknown_and_changes_no_hash_when_unset(tmp_path):
    from dkilab.config import ConfigError

    with pytest.raises(ConfigError, match="language"):
        _embedder(tmp_path, _records("en"), language="fr")
    from dkilab.eval.harness.experiment import DatasetSpec, identity_params

    assert "language" not in identity_params(DatasetSpec(name="locomo"))  # earlier cells keep their hashes


def test_a_store_build_shows_messages_rate_and_eta(embedder, tmp_path, monkeypatch, capsys):
    from dkilab.eval.data import load_dataset
    from dkilab.eval.harness import stores

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    convs = load_dataset("fixtures", limit=2)
    n = sum(len(c.messages) for c in convs)
    stores.store_for(convs[:1], "quiet", embedder).close()
    assert "msg" not in capsys.readouterr().err  # a small build stays quiet
    monkeypatch.setattr(stores, "PROGRESS_FROM", 1)
    stores.store_for(convs, "loud", embedder).close()
    err = capsys.readouterr().err
    assert f"{n}/{n}" in err and "msg/s" in err and "store loud" in err
