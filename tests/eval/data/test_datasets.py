import json

import pytest
from dkilab.eval.data import DatasetNotFoundError, load_dataset, load_fixtures, load_memdaily
from dkilab.eval.data.ablation import ablation_split

from tests.eval.data.test_locomo import needs_data


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


def _write_madial(root, lang="en"):
    """A two-dialogue MADial-Bench in the published layout (our own text); one line lacks its tag."""
    d = root / "madial_bench" / lang
    d.mkdir(parents=True)
    dialogues = [
        {"dialogue": ["<BOD>\n", '<Ann>: "I have a piano recital tomorrow."\n', '<Assistant>: "How exciting!"\n',
                      '<Ann>: "I am so nervous though."\n', '<Assistant>: "Remember the spring concert? You shone."\n',
                      "<EOD>\n"], "test-turn": [4], "relevant-id": [7], "user-id": 1},
        {"dialogue": ["<BOD>\n", '<Ann>: "My dog Biscuit is sick."\n', '"Oh no, what happened?"\n',
                      '<Ann>: "He will not eat."\n', '<Assistant>: "He got better fast last winter too."\n',
                      '<Ann>: "True!"\n', "<EOD>\n"], "test-turn": [4], "relevant-id": [8, 9], "user-id": 1},
    ]
    memory = [{"7": {"time": "2023-04-02", "scene": "Activity", "emotion": "Happy",
                     "event": "Ann played the piano at the spring concert and felt proud."}},
              {"8": {"time": "2023-01-10", "scene": "Pets", "emotion": "Sad",
                     "event": "Ann's dog Biscuit caught a cold."}},
              {"9": {"time": "2023-01-20", "scene": "Pets", "emotion": "Happy",
                     "event": "Biscuit recovered and Ann was relieved."}},
              {"10": {"time": "2023-02-01", "scene": "Food", "emotion": "Happy", "event": "Someone else ate noodles."}}]
    (d / f"MADial-Bench-{lang}-dialogue.json").write_text("\n".join(json.dumps(x) for x in dialogues) + "\n")
    (d / f"MADial-Bench-{lang}-memory.json").write_text("\n".join(json.dumps(x) for x in memory) + "\n")
    return d


def test_madial_loader_keeps_the_gold_turn_out_of_the_history(tmp_path):
    _write_madial(tmp_path)
    c1, c2 = load_dataset("madial_bench_en", data_dir=str(tmp_path))
    # one conversation (store user) per dialogue: the user's memory archive and that dialogue's turns, nothing of
    # another dialogue (version 1 put every dialogue of a user in one store)
    assert (c1.user_id, c2.user_id) == ("madial-en-u1-d0", "madial-en-u1-d1") and c1.speakers["user"] == "Ann"
    for conv in (c1, c2):
        mem = [m for m in conv.messages if m.metadata["kind"] == "memory"]
        # by date; mem10 names no user
        assert [m.message_id for m in mem] == ["madial:en:mem8", "madial:en:mem9", "madial:en:mem7"]
        assert len({m.session_id for m in mem}) == 3  # one session each: no reply context between events
        assert {m.user_id for m in conv.messages} == {conv.user_id}
        (q,) = conv.questions
        assert {m.session_id for m in conv.messages if m.metadata["kind"] == "dialogue"} == {q.session_id}
    q1, q2 = c1.questions[0], c2.questions[0]
    assert (q1.question, q1.answer, q1.evidence_ids) == ("I am so nervous though.",
                                                         "Remember the spring concert? You shone.", ["madial:en:mem7"])
    d1 = [m for m in c1.messages if m.session_id == q1.session_id]
    assert [(m.role, m.content) for m in d1] == [("user", "I have a piano recital tomorrow."),
                                                 ("assistant", "How exciting!")]
    assert all(q.answer not in m.content for c in (c1, c2) for q in c.questions for m in c.messages)
    d2 = [m for m in c2.messages if m.session_id == q2.session_id]
    assert d2[1].role == "assistant" and d2[1].content == "Oh no, what happened?"  # untagged line: speaker by position
    assert q2.evidence_ids == ["madial:en:mem8", "madial:en:mem9"]
    assert [c.user_id for c in load_dataset("madial_bench_en", data_dir=str(tmp_path), limit=1)] == ["madial-en-u1-d0"]


def test_the_encoder_bench_reads_each_madial_message_once(tmp_path):
    """Every dialogue's store repeats its user's memory archive; `dkilab bench embedders` times each text once."""
    from dkilab.bench.embedders import _texts

    _write_madial(tmp_path, "zh")
    ((label, texts, queries),) = _texts(str(tmp_path), 1000)
    assert label == "zh (MADial-Bench)" and len(queries) == 2
    assert len(texts) == len(set(texts)) == 3 + 2 + 2  # three events of Ann, two turns before each test turn


def test_madial_errors_name_the_file(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"madial_bench/zh.*hejunqing/MADial-Bench"):
        load_dataset("madial_bench_zh", data_dir=str(tmp_path))
    d = _write_madial(tmp_path)
    (d / "MADial-Bench-en-memory.json").write_text('{"7": {"time": "2023-04-02", "event": "Ann played."}}\n{oops\n')
    with pytest.raises(ValueError, match=r"MADial-Bench-en-memory\.json:2: not valid JSON"):
        load_dataset("madial_bench_en", data_dir=str(tmp_path))
    (d / "MADial-Bench-en-memory.json").write_text('{"7": {"time": "2023-04-02", "event": "Ann played."}}\n')
    with pytest.raises(ValueError, match=r"mem8.*Ann"):
        load_dataset("madial_bench_en", data_dir=str(tmp_path))


@pytest.mark.slow
@needs_data
def test_madial_loader_matches_the_dataset_card():
    for lang in ("zh", "en"):
        convs = load_dataset(f"madial_bench_{lang}")
        qs = [q for c in convs for q in c.questions]
        assert len(convs) == 160 and len(qs) == 160 and sum(len(q.evidence_ids) for q in qs) == 405
        mem = {m.message_id for c in convs for m in c.messages if m.metadata["kind"] == "memory"}
        assert len(mem) == {"zh": 171, "en": 160}[lang]


def test_longmemeval_loads_its_published_format_one_conversation_per_question():
    from dkilab.eval.data import DATASETS
    from dkilab.eval.data.longmemeval import TYPES

    from tests.conftest import ROOT

    convs = DATASETS["longmemeval_s"](str(ROOT / "tests" / "data"))
    assert [c.conversation_id for c in convs] == ["q_user_1", "q_time_1", "q_update_1_abs"]
    user, time, abstain = (c.questions[0] for c in convs)
    assert {q.category for q in (user, time, abstain)} <= set(TYPES)
    assert user.evidence_ids == ["q_user_1:sess_b:0"] and user.answer == "a beagle" and user.answerable
    assert user.metadata["answer_session_ids"] == ["q_user_1:sess_b"]
    assert [m.message_id for m in convs[0].messages][:2] == ["q_user_1:sess_a:0", "q_user_1:sess_a:1"]
    assert convs[0].messages[2].session_id == "q_user_1:sess_b" and convs[0].messages[1].role == "assistant"
    assert str(user.question_date) == "2023-06-02 10:00:00+00:00"
    assert time.evidence_ids == ["q_time_1:s1:0", "q_time_1:s2:0"]
    assert not abstain.answerable and abstain.answer is None and "never mentioned" in abstain.metadata["explanation"]
    assert len(DATASETS["longmemeval_s"](str(ROOT / "tests" / "data"), limit=1)) == 1


def test_longmemeval_errors_name_the_file_the_question_and_the_key(tmp_path):
    import json

    import pytest
    from dkilab.eval.data import DATASETS
    from dkilab.eval.data.longmemeval import LongMemEvalError

    (tmp_path / "longmemeval").mkdir()
    bad = {"question_id": "q9", "question_type": "multi-session", "question": "?", "answer": "x",
           "haystack_sessions": [[{"role": "user", "content": "hi"}]], "haystack_dates": ["20 May 2023"]}
    (tmp_path / "longmemeval" / "longmemeval_oracle.json").write_text(json.dumps([bad]), encoding="utf-8")
    with pytest.raises(LongMemEvalError, match=r"longmemeval_oracle.json: question q9: haystack_dates\[0\]: date"):
        DATASETS["longmemeval_oracle"](str(tmp_path))
    del bad["haystack_dates"]
    (tmp_path / "longmemeval" / "longmemeval_oracle.json").write_text(json.dumps([bad]), encoding="utf-8")
    with pytest.raises(LongMemEvalError, match="question q9: key 'haystack_dates' is missing"):
        DATASETS["longmemeval_oracle"](str(tmp_path))
    (tmp_path / "longmemeval" / "longmemeval_oracle.json").write_text("[{", encoding="utf-8")
    with pytest.raises(LongMemEvalError, match="longmemeval_oracle.json: not JSON"):
        DATASETS["longmemeval_oracle"](str(tmp_path))
    (tmp_path / "longmemeval" / "longmemeval_oracle.json").write_text("{}", encoding="utf-8")
    with pytest.raises(LongMemEvalError, match="expected a list of question records"):
        DATASETS["longmemeval_oracle"](str(tmp_path))
    with pytest.raises(Exception, match="longmemeval_m"):
        DATASETS["longmemeval_m"](str(tmp_path))  # not there: says how to get it
