"""Fitted-data checks by content, not by name (issue 84): a fitted component's conversations are known by
their digests (dkilab/eval/harness/fitted_on.json), so a `path:` copy under another name, the shipped fusion file
named explicitly or the adapter's merged directory named as the encoder are refused like the default."""
import json
import os
import subprocess
import sys

import pytest
import yaml
from dkilab.config import ConfigError
from dkilab.encoders.adapter import FITTED_ON_FILE
from dkilab.eval.data import load_dataset
from dkilab.eval.harness import fitted
from dkilab.eval.harness.experiment import experiment_from_dict, load_experiment

from tests.conftest import ROOT

DATA = os.environ.get("DKILAB_DATA_DIR")
HAVE_LOCOMO = bool(DATA) and os.path.isdir(os.path.join(DATA or "", "locomo"))
needs_locomo = pytest.mark.skipif(not HAVE_LOCOMO, reason="needs LoCoMo under $DKILAB_DATA_DIR")


def _copy(convs, path):
    """The conversations in the normalised format under new ids: what a user's own copy would be."""
    def msg(m):
        return {"role": m.role, "content": m.content, "timestamp": m.timestamp.isoformat() if m.timestamp else None}

    recs = [{"conversation_id": f"copy-{i}", "messages": [msg(m) for m in c.messages],
             "questions": [{"question": q.question, "answer": None if q.answer is None else str(q.answer)}
                           for q in c.questions[:2]]} for i, c in enumerate(convs)]
    path.write_text(json.dumps(recs, ensure_ascii=False), encoding="utf-8")
    return path


def _config(tmp_path, dataset, params=None, embedder=None):
    cfg = {"name": "fitted", "model": {"spec": "scripted:oracle", "max_context": 4096}, "datasets": [dataset],
           "defaults": {"history_budget": 1024}, "strategies": [{"name": "recall_v4", "params": params or {}}]}
    if embedder:
        cfg["embedder"] = embedder
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_copy_of_fitted_conversations_under_another_name_is_refused_by_content(tmp_path, monkeypatch):
    """Without the data: the record is pointed at two fixture conversations, then a `path:` copy of them."""
    convs = load_dataset("fixtures")[:2]
    monkeypatch.setattr(fitted, "_records", lambda: {"fusion": {"conversations": [
        fitted.conversation_digest(c) for c in convs]}})
    fitted._asked_digests.cache_clear()
    copy = _copy(convs, tmp_path / "mine.json")
    with pytest.raises(ConfigError, match=r"matched by content: the learned fusion model.*fitted on 2 of them"):
        load_experiment(_config(tmp_path, {"name": "mine", "path": str(copy)}))
    load_experiment(_config(tmp_path, {"name": "mine", "path": str(copy)},  # the stock fusion: nothing fitted
                            {"recall": {"signals": {"fusion": "weighted"}}}))
    other = _copy(load_dataset("fixtures")[2:], tmp_path / "other.json")
    load_experiment(_config(tmp_path, {"name": "other", "path": str(other)}))  # other conversations pass


@needs_locomo
def test_the_record_is_what_the_data_gives():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "fitted_digests.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_locomo
def test_locomo_dev_under_another_name_the_named_fusion_file_and_the_merged_adapter_are_refused(tmp_path):
    copy = _copy(load_dataset("locomo", data_dir=DATA)[:5], tmp_path / "my_chats.json")  # LoCoMo 0-4, renamed
    with pytest.raises(ConfigError, match="matched by content"):
        load_experiment(_config(tmp_path, {"name": "my_chats", "path": str(copy)}))
    with pytest.raises(ConfigError, match="learned fusion model"):  # the shipped file, named by its path
        load_experiment(_config(tmp_path, {"name": "locomo", "split": "dev"},
                                {"recall": {"signals": {"fusion_model": "dkilab/recall/fusion_lr.json"}}}))
    merged = tmp_path / "merged"  # a directory the adapter was merged into, named as the English encoder
    merged.mkdir()
    (merged / FITTED_ON_FILE).write_text("{}")
    with pytest.raises(ConfigError, match="encoder adapter"):
        load_experiment(_config(tmp_path, {"name": "locomo", "split": "dev"},
                                {"recall": {"signals": {"fusion": "weighted"}}}, {"model": str(merged)}))
    load_experiment(_config(tmp_path, {"name": "locomo", "split": "test"}))  # held back: accepted


@needs_locomo
def test_a_split_of_a_limit_that_selects_nothing_says_so():
    cfg = {"name": "x", "model": {"spec": "scripted:oracle", "max_context": 4096},
           "datasets": [{"name": "locomo", "split": "test", "limit": 1}],
           "defaults": {"history_budget": 1024}, "strategies": [{"name": "recall_v4"}]}
    with pytest.raises(ConfigError, match="asks about no conversation: split test"):
        experiment_from_dict(cfg)
