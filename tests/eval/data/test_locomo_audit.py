"""`exclude_audited` on LoCoMo: the questions whose gold the public audit (github.com/dial481/locomo-audit) finds
wrong are left out, a wrong citation alone is kept, and the identity records the audit's digest, how many it
excluded and the ceiling they left; a different data version or a malformed entry is refused, naming it. On a
LoCoMo-format file and audit entries written for dkilab."""
import copy
import json

import pytest
from dkilab.config import ConfigError

from tests.eval.data.test_normalized import LOCOMO_VARIANT


@pytest.fixture
def data(tmp_path, monkeypatch):
    second = copy.deepcopy(LOCOMO_VARIANT[0]) | {"sample_id": "v2"}
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text(json.dumps([LOCOMO_VARIANT[0], second]), encoding="utf-8")
    audit = tmp_path / "audit"
    audit.mkdir()
    entry = lambda qid, question, gold, kind: {"question_id": qid, "question": question,  # noqa: E731
                                               "error_type": kind, "golden_answer": gold, "category": 4}
    (audit / "errors_conv_0.json").write_text(json.dumps([
        entry("locomo_0_qa1", "How is the kitten?", "Growing fast", "HALLUCINATION"),
        entry("locomo_0_qa0", "What is the kitten called?", "Miso", "WRONG_CITATION")]))
    (audit / "errors_conv_1.json").write_text(json.dumps([entry("locomo_1_qa2", "What did Ana show?", "a photo",
                                                                "TEMPORAL_ERROR")]))
    monkeypatch.setenv("DKILAB_DATA_DIR", str(tmp_path))
    return tmp_path


def cell(**dataset):
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

    return expand_cells(experiment_from_dict({"name": "audit", "datasets": [{"name": "locomo"} | dataset],
                                              "strategies": [{"name": "no_memory"}]}))[0]


def test_the_wrong_golds_are_left_out_and_a_wrong_citation_is_kept(data):
    from dkilab.eval.harness.cell import load_cell_questions

    plain, audited = cell(), cell(exclude_audited="audit")
    kept = [q.qid for _, q in load_cell_questions(audited, str(data))]
    everything = [q.qid for _, q in load_cell_questions(plain, str(data))]
    assert set(everything) - set(kept) == {"v1:q1", "v2:q2"} and "v1:q0" in kept
    info = audited.resolved["dataset"]["audit"]
    assert info["excluded"] == 2 and info["ceiling_before"] == round(1 - 2 / 6, 4) and "dial481" in info["source"]
    assert audited.config_hash != plain.config_hash and "audit" not in plain.resolved["dataset"]


def test_another_data_version_or_a_malformed_entry_is_refused_naming_it(data):
    from dkilab.eval.harness.cell import load_cell_questions

    (data / "audit" / "errors_conv_1.json").write_text(json.dumps([
        {"question_id": "locomo_1_qa2", "question": "What did Ben show?", "error_type": "TEMPORAL_ERROR"}]))
    with pytest.raises(ConfigError, match=r"locomo_1_qa2 is 'What did Ben show\?' in the audit"):
        load_cell_questions(cell(exclude_audited="audit"), str(data))
    (data / "audit" / "errors_conv_1.json").write_text(json.dumps([{"question_id": "locomo_1_qa2",
                                                                    "error_type": "TYPO"}]))
    with pytest.raises(ConfigError, match=r"errors_conv_1.json: entry 0 \('locomo_1_qa2'\).*got 'TYPO'"):
        cell(exclude_audited="audit")
    with pytest.raises(ConfigError, match="holds no errors_conv"):
        cell(exclude_audited="locomo")
    with pytest.raises(ConfigError, match="the audit is of LoCoMo's answer key"):
        cell(name="fixtures", exclude_audited="audit")


def test_a_missing_file_and_a_wrong_citations_text_or_gold_are_refused(data):
    """Issue 85: a folder short of a conversation's file quietly excluded fewer golds (87 of 99 on the real audit);
    a wrong citation's question text and every entry's golden_answer were never checked."""
    from dkilab.eval.harness.cell import load_cell_questions

    audit = data / "audit"
    first = json.loads((audit / "errors_conv_0.json").read_text())
    (audit / "errors_conv_1.json").rename(data / "aside.json")
    with pytest.raises(ConfigError, match=r"audit lacks errors_conv_1.json \(the audit has one file per"):
        load_cell_questions(cell(exclude_audited="audit"), str(data))
    (data / "aside.json").rename(audit / "errors_conv_1.json")
    for key, value, says in (("question", "What is the puppy called?", "is 'What is the puppy called\\?' in the audit"),
                             ("golden_answer", "Mochi", "golden_answer is 'Mochi' in the audit but 'Miso' here")):
        edited = copy.deepcopy(first)
        edited[1][key] = value  # the wrong-citation entry
        (audit / "errors_conv_0.json").write_text(json.dumps(edited))
        with pytest.raises(ConfigError, match=rf"locomo_0_qa0(?:'s)? {says}"):
            load_cell_questions(cell(exclude_audited="audit"), str(data))
