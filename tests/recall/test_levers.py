"""The recall levers beyond fusing two signals, each against a small hand-made history on a real store
(real MiniLM vectors, real FTS5): a neighbour is added, a speaker filter applies, a date cue narrows,
and with the lever off each query ranks as before. Plus the date-cue parser on cues in both languages."""
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.recall import MultiSignalRecall, RecallConfig
from dkilab.recall.temporal import date_window
from dkilab.types import Message

T0 = datetime(2023, 5, 1, 9, tzinfo=timezone.utc)  # a Monday


def m(i, text, speaker, day, session=None, role=None):
    role = role or ("user" if speaker == "Ana" else "assistant")
    return Message(f"m{i}", "alice", session or f"s{day}", i, role, text, T0 + timedelta(days=day, minutes=i),
                   speaker=speaker)


HISTORY = [
    m(0, "We should cook something new this weekend.", "Ana", 0),
    m(1, "How about a mushroom risotto with parmesan?", "Ben", 0),
    m(2, "Sounds great, I will buy the rice.", "Ana", 0),
    m(3, "I cooked a spicy lentil curry for dinner.", "Ben", 14),
    m(4, "I cooked a lemon chicken for dinner.", "Ana", 21),
    m(5, "My brother visited and we played chess.", "Ana", 28),
    m(6, "Ben, did you finish the book about chess openings?", "Ana", 29),
    m(7, "Yes, I finished it and loved the chess chapter.", "Ben", 29),
]
ASKED = T0 + timedelta(days=30)  # Wednesday 31 May


@pytest.fixture
def memory(store):
    store.add_messages(HISTORY)
    return store.for_user("alice")


def recall(memory, question, asked_at=ASKED, **signals):
    cfg = RecallConfig().model_copy(deep=True)
    base = {"reference_enabled": False, "vector_threshold": 0.0, "fusion": "weighted", "speaker_focus": 0.0}
    cfg = cfg.with_updates({f"signals.{k}": v for k, v in (base | signals).items()})
    return MultiSignalRecall(cfg, None, memory).recall(question, max_results=8, asked_at=asked_at)


def ids(result):
    return [x.message_id for x in result.messages]


def test_a_neighbour_of_a_top_hit_is_added(memory):
    q = "mushroom risotto"
    off = recall(memory, q, keyword_enabled=True, vector_enabled=False)
    assert ids(off)[0] == "m1" and "m2" not in ids(off)  # the reply shares no word with the question
    on = recall(memory, q, keyword_enabled=True, vector_enabled=False, neighbor_expansion=1, neighbor_top=1)
    assert ids(on)[0] == "m1" and {"m0", "m2"} <= set(ids(on))
    added = {r.message.message_id: r for r in on.ranked}
    assert added["m2"].signals == {"neighbor": pytest.approx(added["m1"].score * 0.5)}


def test_a_speaker_filter_applies_when_the_question_names_one_speaker(memory):
    q = "What did Ben cook for dinner?"
    off = recall(memory, q)
    on = recall(memory, q, speaker_focus=0.1)
    assert ids(on)[0] == "m3"  # Ben's curry, not Ana's chicken
    ben_first = [x.speaker for x in on.messages[:3]]
    assert ben_first.count("Ben") >= 2 and ids(off) != ids(on)
    # a question naming both speakers is not focused: the same ranking as with the lever off
    q = "What did Ben and Ana cook for dinner?"
    assert ids(recall(memory, q, speaker_focus=0.1)) == ids(recall(memory, q))


def test_a_date_cue_narrows_to_its_window(memory):
    q = "What spicy dinner did we cook last week?"  # asked Wed 31 May: last week = 22-29 May
    off = recall(memory, q)
    on = recall(memory, q, temporal_focus=0.1)
    assert ids(off)[0] == "m3"  # the spicy curry, 15 May
    assert ids(on)[0] == "m4"  # 22 May, in the window
    # two weeks later the same words point at a week when nothing was said: no focus, the ranking is as off
    assert ids(recall(memory, q, asked_at=ASKED + timedelta(days=14), temporal_focus=0.1)) == ids(off)
    # asked_at unknown: the cue resolves against the newest message (30 May), the same window here
    assert ids(recall(memory, q, asked_at=None, temporal_focus=0.1))[0] == "m4"
    # "in May" names the month: both dinners are in it
    q = "Who cooked in May?"
    assert set(ids(recall(memory, q, temporal_focus=0.1))[:2]) == {"m3", "m4"}


NOW = datetime(2023, 8, 16, 15, tzinfo=timezone.utc)  # a Wednesday


@pytest.mark.parametrize("query, window", [
    ("What did Ana cook last week?", ("2023-08-07", "2023-08-14")),
    ("When did she go to Paris in May?", ("2023-05-01", "2023-06-01")),
    ("What happened on 7 May 2023?", ("2023-05-07", "2023-05-08")),
    ("Who came on May 7, 2023?", ("2023-05-07", "2023-05-08")),
    ("What did they do in 2022?", ("2022-01-01", "2023-01-01")),
    ("Where was the party on Dec 12?", ("2022-12-12", "2022-12-13")),  # the latest 12 Dec before now
    ("What happened 3 days ago?", ("2023-08-12", "2023-08-15")),
    ("What did I say yesterday?", ("2023-08-15", "2023-08-16")),
    ("我们五月份去了哪里？", ("2023-05-01", "2023-06-01")),
    ("2023年5月7日那天下雨了吗", ("2023-05-07", "2023-05-08")),
    ("上周吃了什么", ("2023-08-07", "2023-08-14")),
    ("三天前说的那家店", ("2023-08-12", "2023-08-15")),
    ("去年的旅行", ("2022-01-01", "2023-01-01")),
    # a cue that names its year wins over one before it
    ("What did she recently watch and recommend on February 7, 2022?", ("2022-02-07", "2022-02-08")),
    ("What did Maria start doing in December 2021?", ("2021-12-01", "2022-01-01")),  # not "in December" alone
    ("What did I buy in May 2022?", ("2022-05-01", "2022-06-01")),  # not the latest May (2023)
    ("Recently, in 2022, where did we travel?", ("2022-01-01", "2023-01-01")),
    ("最近，2022年3月5日我们见了谁", ("2022-03-05", "2022-03-06")),
    ("What may I bring to the party?", None),  # the modal verb is not the month
    ("我想吃点海鲜", None),
])
def test_date_cues_resolve_against_when_the_question_is_asked(query, window):
    got = date_window(query, NOW)
    assert (got and (got[0].date().isoformat(), got[1].date().isoformat())) == window
    if got:
        assert got[0].tzinfo == NOW.tzinfo


def test_the_rules_that_name_a_year_come_first():
    """`date_window` ranks the first `_DATED` rules above the rest: exactly those patterns hold a year."""
    from dkilab.recall import temporal

    dated = [r"\d{4}" in pattern or "(?:19|20)" in pattern for pattern, _ in temporal._rules(NOW.replace(tzinfo=None))]
    assert dated == [True] * temporal._DATED + [False] * (len(dated) - temporal._DATED)


def test_feedback_terms_find_a_message_that_shares_no_word_with_the_question(store):
    """Pseudo-relevance feedback (`prf_docs`): the words of the top hit that the question lacks search
    again, so the message about the parmesan is found for "mushroom risotto"; off, the ranking is as before;
    and the lever, while off, is not part of a cell's identity (adding it re-ran no cell)."""
    from dkilab.eval.harness.experiment import identity_params
    from dkilab.strategies.recall_only import RecallOnly

    store.add_messages([m(0, "How about a mushroom risotto tonight?", "Ben", 0),
                        m(1, "Risotto needs parmesan, the aged parmesan from Bologna.", "Ana", 0),
                        m(2, "The parmesan from Bologna was expensive but worth it.", "Ana", 3),
                        m(3, "My brother visited and we played chess.", "Ana", 5)])
    memory = store.for_user("alice")
    q = "mushroom risotto"
    off = recall(memory, q, keyword_enabled=True, vector_enabled=False)
    assert "m2" not in ids(off) and ids(off)[:2] == ["m0", "m1"]
    on = recall(memory, q, keyword_enabled=True, vector_enabled=False, prf_docs=2, prf_terms=3)
    assert ids(on)[:2] == ["m0", "m1"] and "m2" in ids(on) and "m3" not in ids(on)
    added = next(r for r in on.ranked if r.message.message_id == "m2")
    assert set(added.signals) == {"prf"}
    assert ids(recall(memory, q, keyword_enabled=True, vector_enabled=False, prf_docs=0, prf_terms=9)) == ids(off)
    params = RecallOnly.Params()
    signals = identity_params(params)["recall"]["signals"]
    assert not {"prf_docs", "prf_terms", "prf_weight"} & set(signals) and "speaker_focus" in signals
    on = RecallOnly.Params(recall={"signals": {"prf_docs": 2}})
    assert {"prf_docs": 2, "prf_terms": 5,
            "prf_weight": 0.5}.items() <= identity_params(on)["recall"]["signals"].items()
