import json

import pytest

from dkilab.eval.datasets import DatasetNotFoundError, load_dataset, load_fixtures, load_memdaily
from dkilab.eval.datasets.ablation import ablation_split
from tests.eval.test_locomo import needs_data


def test_fixtures_meet_their_card():
    convs = load_fixtures()
    qs = [q for c in convs for q in c.questions]
    assert len(convs) == 4 and {c.language for c in convs} == {"en", "cn"}
    assert len(qs) == 48 and sum(not q.answerable for q in qs) == 12
    assert all(len({m.session_id for m in c.messages}) == 3 and c.preferences for c in convs)
    from dkilab.text.tokens import HeuristicTokenCounter

    est = HeuristicTokenCounter()  # (SmolLM2's tokenizer: 227-497 tokens)
    assert all(max(est.count_tokens(m.content) for m in c.messages) > 200 for c in convs)  # the long messages
    ids = {m.message_id for c in convs for m in c.messages}
    assert all(e in ids for q in qs for e in q.evidence_ids)
    assert load_dataset("fixtures", limit=1, question_limit=3)[0].questions == convs[0].questions[:3]


def test_fixture_errors_name_file_and_turn(tmp_path):
    bad = json.loads(load_fixtures.__globals__["FIXTURES"].read_text())
    bad["conversations"][0]["questions"][0]["evidence"] = ["maya_s9#4"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json.*u_maya question 0.*maya_s9#4"):
        load_fixtures(path=path)


def test_ablation_probes_remove_the_evidence():
    convs = ablation_split(load_fixtures())
    for conv in convs:
        ids = {m.message_id for m in conv.messages}
        probes = [q for q in conv.questions if q.category == "ablation"]
        assert probes and all(not q.answerable and q.answer is None for q in probes)
        assert all(e not in ids for q in probes for e in q.metadata["removed"])
        assert all(e in ids for q in conv.questions if q.answerable for e in q.evidence_ids)


def test_missing_memdaily_names_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"memdaily.*MemSim"):
        load_memdaily(str(tmp_path))


@pytest.mark.slow
@needs_data
def test_memdaily_loader_matches_the_dataset_card():
    convs = load_memdaily()
    qs = [q for c in convs for q in c.questions]
    assert len(convs) == 3000 and len(qs) == 2954 and sum(len(c.messages) for c in convs) == 26531
    assert all(q.choices and q.answer in q.choices and q.evidence_ids for q in qs)
    assert all(q.metadata["answer_text"] for q in qs)
    few = load_memdaily(limit=24)
    assert len({c.questions[0].category for c in few if c.questions}) >= 20  # round-robin over the files
