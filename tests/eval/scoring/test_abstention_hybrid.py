"""Issue 33: the hybrid abstention detector (rules where sure, a logistic regression over e5 vectors
elsewhere), its validation by source, the path each decision took, and rules-only still selectable."""
import json

import pytest
from dkilab.bench.abstention import PROBES
from dkilab.text.abstention.learned import HybridDetector, get_detector, load_weights, rule_decision
from dkilab.text.abstention.rules import RULES_VERSION


def test_the_phrasings_issue_33_quoted_are_right_without_being_trained_on():
    from dkilab.bench.abstention_train import load_sources

    texts = {r["text"].lower() for r in load_sources()}
    hybrid = get_detector("hybrid")
    for text, gold in PROBES:
        assert text.lower() not in texts  # never in the labelled set the weights were fitted on
        assert hybrid.is_abstention(text) is gold, text
    structural = get_detector("structural")
    assert sum(structural.is_abstention(t) is not g for t, g in PROBES) >= 4  # the rules alone miss most of them


def test_the_rules_decide_only_what_they_are_sure_of():
    assert rule_decision("Not mentioned.") is True and rule_decision("不确定。") is True
    assert rule_decision("Unknown.") is True
    assert rule_decision("Lisbon.") is False and rule_decision("是里斯本。") is False
    assert rule_decision("I'm not sure, maybe Lisbon?") is False  # a hedge that offers a value answers
    assert rule_decision("我不太确定，可能是九点半。") is False
    assert rule_decision("不清楚的地方她都问了客户经理。") is False  # 不清楚 modifies a noun: content
    assert rule_decision("没有提到的事我无法回答。") is None  # ... unless I say I cannot answer: the model decides
    assert rule_decision("I have no record of that.") is None


def test_rules_version_2_fixes_what_version_1_got_wrong():
    """Each rule added in rules version 2, on phrasings outside the labelled set."""
    # "but" opening a clause that itself denies is no hedge offering a value; "but maybe X" still is
    assert rule_decision("I'm sorry, but I have no record of your gym.") is None
    assert rule_decision("Sorry, but I can't tell you when the bus left.") is None
    assert rule_decision("I can't say for sure, but maybe the 9th.") is False
    assert rule_decision("We haven't covered that yet.") is None  # a bare "yet" clause offers nothing
    # titles, names and quoted speech are masked before looking for a word of absence
    assert rule_decision("Unknown Pleasures by Joy Division.") is False
    assert rule_decision("It was Nowhere Man, by the Beatles.") is False
    # a word-free answer that speaks of the answerer goes to the learned part; one that does not, answers
    assert rule_decision("That's beyond what I know.") is None and rule_decision("The Lisbon office.") is False
    # a person in the story who did not know is a fact about them; the answerer's not knowing is not
    assert rule_decision("Your uncle had no idea about the surprise.") is False
    assert rule_decision("她老公不记得结婚纪念日了。") is False
    assert rule_decision("Your uncle never told me his address.") is None
    assert rule_decision("你叔叔在哪里工作我无法确定。") is None
    # the user's own words reported back, negated or not, are content
    assert rule_decision("You said you don't eat fish.") is False and rule_decision("你说过你不喝酒。") is False
    assert rule_decision("You said nothing about that.") is None
    # an embedded question, then "I don't know", abstains
    assert rule_decision("他最后去了哪家医院，我不知道。") is True
    assert rule_decision("谁来的我不知道，但是小王肯定来了。") is False
    # rules version 3: the answerer's or the record's "cannot say" in Chinese abstains; a person's does not
    assert rule_decision("根据聊天记录，我看不出来。") is True and rule_decision("我实在答不上来。") is True
    assert rule_decision("她说不出来。") is None and rule_decision("说不出来的滋味。") is None
    # 没有 ... 的 is left to the learned part, 不 ... 的 before a noun answers
    assert rule_decision("没有足够的信息回答这个问题。") is None
    # a parrot of the prompt's fixed text is no refusal; a refusal that quotes some of it still is one
    assert rule_decision("The [TRUST AND REASONING RULES] say summaries are not complete factual records.") is False
    quoting = "The [SUMMARY] items above are summaries, not complete factual records, so I cannot say."
    assert rule_decision(quoting) is None
    assert rule_decision("If the memory does not contain the answer, reply exactly: Not mentioned.") is None


def test_rules_versions_4_to_6_read_idioms_of_not_knowing_by_whose_they_are():
    """An idiom of not knowing abstains when the answerer (or the topic) is its subject, and is a fact about a
    person in the story when they are; phrasings outside the labelled set and the fresh check."""
    for text in ("I'm totally drawing a blank on your nephew's name.", "Where you parked doesn't ring a bell.",
                 "I came up empty when I looked for the receipt.", "Honestly, I'm in the dark on that.",
                 "I'd only be guessing if I named a price.", "Your neighbour's plan is a mystery to me.",
                 "That lies outside anything you've told me.", "你女儿的老师叫什么，我一无所知。",
                 "这件事我一点印象都没有", "关于那次搬家，我没有任何头绪。", "这个我真记不起来了。"):
        assert rule_decision(text) is True, text
    for text in ("Your nephew drew a blank in the spelling bee.", "The song didn't ring a bell for your mum.",
                 "She was completely in the dark about the merger.", "I'm guessing you mean the 5th: it was a Friday.",
                 "I'm Drawing A Blank was the song on the radio.", "你爸对这件事一无所知，是你妈告诉他的。",
                 "你想不起来的那部电影叫《花样年华》。", "他一头雾水，后来你给他解释了。"):
        assert rule_decision(text) is not True, text
    # rules version 5: a person in the story as the idiom's subject, or the user's report of someone, answers;
    # the answerer as the nearest subject abstains even after a person in the topic
    for text in ("Your cousin was clueless about the surprise.", "你老板对这个计划一无所知。",
                 "你妹妹对那家店没什么印象。", "You told me the address didn't ring a bell for your dad.",
                 "You mentioned that Lena had no idea."):
        assert rule_decision(text) is False, text
    for text in ("Sadly, the title escapes me.", "Afraid I've got nothing about your gym plans.",
                 "你妹妹去了哪家店，我一点印象都没有。"):
        assert rule_decision(text) is True, text
    # rules version 6: the first the answerer hears of it, what it cannot speak to or infer
    for text in ("This is the first I've heard about a new car.", "I'm unable to vouch for the date you picked.",
                 "Nothing about the refund has come up so far.", "Your holiday plans are a gap in my notes.",
                 "你换工作的事，我是第一次听说。", "你们最后住哪，我无法替你回答。", "从现有的聊天里推不出他的生日。"):
        assert rule_decision(text) is True, text
    for text in ("Your dad said it was the first he'd heard of the plan.", "The bank couldn't confirm the transfer.",
                 "她说这件事她也是第一次听说。", "你老板推断不出是谁干的。"):
        assert rule_decision(text) is not True, text


def test_rules_versions_8_to_10_read_what_people_in_the_story_did_not_do():
    """What a person of the user's life (named by a noun, trades included) did not do, and what the user told or
    did not tell someone else, answer; the same words about the answerer, or with a person only in the topic,
    do not. Phrasings outside the labelled set and the fresh check."""
    for text in ("Your landlord never fixed the heating.", "The electrician didn't show up on Tuesday.",
                 "You didn't tell your cousin about the move.", "You told your manager you needed Friday off.",
                 "You never mentioned the fine to anyone.", "快递员一直没把包裹送到。",
                 "你舅舅也不知道那家店搬到哪了。", "你没跟你同事提加薪的事。", "房东那边还没退押金。",
                 "Honestly, your nephew hasn't replied yet."):
        assert rule_decision(text) is False, text
    for text in ("You never told me what your landlord said.", "Your landlord's number never came up.",
                 "The electrician's quote isn't something I have.", "你舅舅住哪你没跟我说过。",
                 "你邻居家狗的名字你没提过。", "水管工收了多少钱，我不知道。",
                 "电工发现了什么问题不在我们的聊天记录里。", "You didn't tell me who your coach is."):
        assert rule_decision(text) is not False, text
    # a Chinese first-person absence with an adverb in between still is the answerer's ("我一点也不记得")
    assert rule_decision("你表姐来玩的事我一点也不记得。") is not False
    # rules version 9: what was not said, named or recorded, with a person as subject, may be the conversation's
    # lack: the learned part decides ("Your cousin was never brought up" abstains, "Your cousin never said" may not)
    for text in ("Your cousin was never brought up.", "The mechanic hasn't come up yet.",
                 "Your aunt wasn't named anywhere.", "你舅舅从没被提起过。", "房东没出现在聊天里。",
                 "你同事没说过这件事。"):
        assert rule_decision(text) is None, text
    # rules version 10: a way of saying something is missing without a negation is never a sure answer; any
    # recipient after "tell"; the answerer would be making it up; "X的人" is a person; a later fact offers a value
    for text in ("You've kept your salary to yourself.", "You skipped over the part about the venue.",
                 "It slipped my mind entirely, if you ever said it."):
        assert rule_decision(text) is not False, text
    for text in ("I'd be inventing it.", "There's a hole in my notes about the trip.",
                 "你去了哪家医院，我要是说了那就是瞎编。"):
        assert rule_decision(text) is True, text
    for text in ("You didn't tell your mentor about the offer.", "You said you had nothing planned for Easter.",
                 "你没跟你导师说换方向的事。", "楼下的人也不知道停电的原因。", "起初不确定，后来才知道是周四。"):
        assert rule_decision(text) is False, text
    for text in ("You didn't tell me about your mentor.", "你没跟我说过你导师的事。",
                 "You didn't mention your mentor."):
        assert rule_decision(text) is not False, text


def test_rules_version_11_reads_negations_that_say_nothing_is_missing_and_a_value_given_first():
    """Negations that say nothing is missing ("can't wait", 谁不知道, A-not-A questions) are no word of absence; a
    first clause that answers (a number, a title, "Yes", 是的) makes a later disclaimer about another detail no
    abstention; an idiom of not knowing after a value is left to the learned part, not called sure. Phrasings
    outside the labelled set, the fresh check and the external check; the other direction holds."""
    for text in ("The concert is on Friday - can't wait!", "这么有名的地方，谁不知道呢，就在西湖边上。",
                 "贵不贵要看季节，旺季三百多。", "是2019年，不过具体哪个月我记不清了。",
                 "Yes, but I can't remember the exact day.", "Room 214, though I forget the floor.",
                 "是的，不过我不记得是谁推荐的了。"):
        assert rule_decision(text) is False, text
    for text in ("这个我真不知道。", "I can't wait to hear it, but I don't know.", "关于你的新地址，我不知道。",
                 "That's a good question, but I don't know.", "是个好问题，不过我不清楚。"):
        assert rule_decision(text) is not False, text
    assert rule_decision("Pad thai. I've got nothing on the price, sorry.") is None  # a value first: not sure
    assert rule_decision("The wedding date? I'm drawing a blank.") is True  # a topic asked back is no value
    assert rule_decision("婚礼日期？我一点印象都没有。") is True


def test_rules_version_12_reads_an_answer_that_tells_something_else_as_an_answer():
    """English chat that tells the answerer's own news, with or without a negation, is an answer the rules are
    sure of; an answer that denies knowing anywhere, or has nothing but a topic beside it, is not. Phrasings
    outside the labelled set, the fresh check and the external check."""
    for text in ("No, I haven't been to Lisbon yet. We're flying out there in March!",
                 "Nope, never tried surfing. I spent the whole summer hiking in the Alps instead.",
                 "Next week I'm starting a pottery class with my sister - can't wait!"):
        assert rule_decision(text) is False, text
    for text in ("I haven't been told where you parked. We could go over it again now.",  # denies being told
                 "Nope, no idea. Your sister might remember the address though.",  # "no idea" beside content
                 "That's not something I have any information on: the name of your dentist.",
                 "As a text-based assistant, I'm not able to look that up for you."):
        assert rule_decision(text) is not False, text
    assert rule_decision("I'm not aware of it. As far as I can see, we never went over your trip.") is not False


def test_rules_version_13_reads_chinese_chat_by_what_it_speaks_of():
    """Chinese: the answerer speaking of nothing it lacks, wondering about the listener, "是啊" before a value,
    answer; a topic not known and then only questions back, or a question then "一时想不起来", abstain. Phrasings
    outside the labelled set, the fresh check and the external check; the other direction holds."""
    for text in ("我去过三次了，那边的海鲜很好吃。", "故事发生在上海，不知道你有没有看过？",
                 "是啊，门票八十块呢，不知道现在涨没涨价呢？"):
        assert rule_decision(text) is False, text
    for text in ("那个不清楚，你知道票价是多少吗？", "这个我也不知道，你还记得是哪一年吗？",
                 "餐厅叫什么？一下子想不起来了。"):
        assert rule_decision(text) is True, text
    assert rule_decision("这个不清楚，不过应该挺贵的。") is False  # a hedged value after it: an answer, as before
    assert rule_decision("我记得你提过，但具体的我想不起来了。") is not False  # the answerer speaks of what it lacks


def test_the_learned_part_is_fitted_to_its_optimum_whatever_the_thread_count():
    """Newton steps in float64 reach the regularised optimum (gradient ~0), so a refit reproduces the shipped
    weights; lbfgs at its default tolerance stopped far from it on such data (a gradient of about 4)."""
    import numpy as np
    from dkilab.bench.abstention_train import _fit
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 40)).astype(np.float32)
    X[:, :5] *= 30  # badly scaled columns, as raw e5 parts beside clause counts are
    y = X[:, 5] + 0.5 * rng.normal(size=600) > 0.8
    m = _fit(X, y, 10.0)
    Xd = X.astype(np.float64)
    p = 1 / (1 + np.exp(-(Xd @ m.coef_[0] + m.intercept_[0])))
    sw = np.where(y, len(y) / (2 * y.sum()), len(y) / (2 * (~y).sum()))  # class_weight="balanced"
    gradient = np.append(m.coef_[0] + 10.0 * Xd.T @ (sw * (p - y)), 10.0 * np.sum(sw * (p - y)))
    assert np.abs(gradient).max() < 1e-6
    with threadpool_limits(1):
        one = _fit(X, y, 10.0)
    assert np.allclose(one.coef_, m.coef_, atol=1e-8) and np.allclose(one.intercept_, m.intercept_, atol=1e-8)


def test_each_decision_records_its_path_and_the_cell_counts_the_learned_ones():
    from dkilab.eval.scoring import aggregate, score_answer
    from dkilab.types import Answer, QAItem

    hybrid = get_detector("hybrid")
    assert hybrid.decide("Not mentioned.") == (True, "rules")
    assert hybrid.decide("That's beyond what I know, sorry.")[1] == "learned"
    item = QAItem("Where did I go?", None, answerable=False, qid="q1")
    rows = [score_answer(item, Answer(text), detector=d)
            for text in ("I don't know.", "That's beyond what I know, sorry.") for d in ("hybrid", "structural")]
    assert [r["abstention_by_learned"] for r in rows] == [False, False, True, False]
    assert [r["hallucinated"] for r in rows] == [0.0, 0.0, 0.0, 1.0]  # the rules alone call the second a hallucination
    assert aggregate(rows[::2])["abstention_by_learned"] == pytest.approx(0.5)
    # a reply that says the record lacks it is read with its question first (text/abstention/asked.py), by either
    # detector: the rules alone called this one a hallucination
    from dkilab.eval.scoring.base import Scored

    for d in ("hybrid", "structural"):
        scored = Scored(item, Answer("I have no record of that."), detector=d)
        assert (scored.abstained, scored.abstention_path) == (True, "asked")


def test_rules_only_stays_selectable_and_each_detector_is_its_own_scoring_identity(tmp_path):
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

    def cell(**extra):
        cfg = {"name": "d", "datasets": [{"name": "fixtures", "question_limit": 1}],
               "strategies": [{"name": "no_memory"}]}
        return expand_cells(experiment_from_dict(cfg | extra, "<test>"))[0]

    hybrid, rules = cell(), cell(abstention_detector="structural")
    assert hybrid.generation_hash == rules.generation_hash and hybrid.scoring_hash != rules.scoring_hash
    card = hybrid.resolved["metrics"]["abstention_detector"]
    assert card["name"] == "hybrid" and card["version"].startswith(f"2+rules{RULES_VERSION}+lr")
    assert 0.9 < card["loso_precision_en"] <= 1.0
    assert rules.resolved["metrics"]["abstention_detector"]["name"] == "structural"
    with pytest.raises(Exception, match="abstention_detector"):
        cell(abstention_detector="magic")


def test_missing_or_broken_weights_say_which_file_and_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="none.json.*--train"):
        load_weights(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": "1", "coef": [0.0]}))
    with pytest.raises(ValueError, match="bad.json.*'intercept'"):
        load_weights(str(bad))
    assert HybridDetector(weights=json.loads((tmp_path / "bad.json").read_text()) | {"intercept": 0, "threshold": 0.5}
                          ).decide("Not mentioned.") == (True, "rules")  # the rules need no weights


def test_leave_one_source_out_holds_each_source_out_of_its_own_training(monkeypatch):
    """On a small slice: each source is predicted by a model that never saw it, and the figures say so."""
    from dkilab.bench import abstention_train as at

    rows = [r for r in at.load_sources() if r["source"] in ("templated:not_told", "templated:answer_plain",
                                                                "templated:outside", "hard:titles")]
    rows = [r for i, r in enumerate(rows) if i % 4 == 0]
    fitted_on = []
    real_fit = at._fit
    monkeypatch.setattr(at, "_fit", lambda X, y, C: fitted_on.append(len(y)) or real_fit(X, y, C))
    v = at.validate(rows, C=1.0, threshold=0.5)
    sizes = {s: sum(r["source"] == s for r in rows) for s in {r["source"] for r in rows}}
    assert sorted(fitted_on[:4]) == sorted(len(rows) - n for n in sizes.values())  # LOSO: all but the held-out source
    assert set(v["per_source"]) == set(sizes) and {"leave_one_source_out", "pooled_5fold", "rules"} <= set(v)
    assert all(0.0 <= m["recall"] <= 1.0 for m in v["leave_one_source_out"].values())


@pytest.mark.slow
def test_bench_prints_both_validations_every_source_and_the_probes(capsys, monkeypatch):
    """The bench's whole output on every 12th row of each source, of each fresh-check round and of the held-back
    replies (the validation's logic is checked on a slice above, the whole fresh check and held-back figures
    against the weights' card in `test_the_fresh_check_is_never_trained_on...`; the full figures come from
    `dkilab bench abstention`, 5 min here)."""
    from dkilab.bench import abstention as bench
    from dkilab.bench import abstention_train
    from dkilab.cli import main

    def every_12th(rows: list[dict], key: str) -> list[dict]:
        per: dict = {}
        return [r for r in rows if per.setdefault(r[key], []).append(r) or len(per[r[key]]) % 12 == 1]

    every = abstention_train.load_sources()
    fresh = every_12th(abstention_train.load_fresh_check(), "round")
    monkeypatch.setattr(abstention_train, "load_sources", lambda: every_12th(every, "source"))
    monkeypatch.setattr(bench, "load_fresh_check", lambda: fresh)
    monkeypatch.setattr(bench, "load_held_back", lambda: every_12th(abstention_train.load_held_back(), "lang"))
    assert main(["bench", "abstention"]) == 0
    out = capsys.readouterr().out
    from dkilab.bench.abstention import FRESH_ROUNDS

    sources = {r["source"] for r in every}
    assert f"from {len(sources)} sources" in out and all(f"    {s} " in out for s in sources)

    assert f"fresh check ({len(fresh)} phrasings never trained on" in out
    assert all(f"hybrid, round {k}" in out for k in FRESH_ROUNDS)  # every round, with what it is
    loso = next(line for line in out.splitlines() if "leave-one-source-out" in line)
    pooled = next(line for line in out.splitlines() if "pooled 5-fold" in line)
    assert "en: precision" in loso and "zh: precision" in loso and "en: precision" in pooled
    assert out.count("    ok    ") == len(PROBES) and "WRONG" not in out


def test_two_detectors_never_share_decisions_and_a_cell_is_encoded_in_one_batch(monkeypatch):
    """The decision cache belongs to one detector: one with other weights (here: a threshold nothing
    reaches) decides the same text its own way. A cell's answers are scored in one batch, the same
    decisions as one by one, from threads at once too."""
    from concurrent.futures import ThreadPoolExecutor

    default = HybridDetector()
    strict = HybridDetector(weights=dict(load_weights()) | {"threshold": 1.01})
    text = "Where that was is beyond what I know."
    assert default.decide(text) == (True, "learned") and strict.decide(text) == (False, "learned")
    assert default.digest != strict.digest
    texts = ["I have no record of that.", "Lisbon.", "Hmm, that never came up between us.", "It was Lisbon, I think.",
             "不清楚的地方她都问了客户经理。", "我们好像没聊过这个。"]
    fresh, calls = HybridDetector(), []
    real = fresh.probability
    monkeypatch.setattr(fresh, "probability", lambda xs: calls.append(len(xs)) or real(xs))
    batch = fresh.decide_many(texts)
    assert len(calls) == 1 and batch == [HybridDetector().decide(t) for t in texts]
    assert fresh.decide_many(texts) == batch and len(calls) == 1  # cached: nothing encoded again
    shared = HybridDetector()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: shared.decide_many(texts), range(8)))
    assert all(r == batch for r in results)


def test_the_dev_sources_alone_choose_c_and_the_threshold():
    """select() scores the dev sources' leave-one-source-out predictions only: the grid point it picks has the
    best minimum of precision and recall there, each grid point's figures count the dev rows only, and the
    chosen point is what validate() and the shipped weights use."""
    from dkilab.bench import abstention_train as at

    rows = [r for r in at.load_sources() if r["source"] in ("templated:not_told", "templated:answer_plain",
                                                            "hard:titles",
                                                               "templated:outside", "hard:negated_user")]
    rows = [r for i, r in enumerate(rows) if i % 3 == 0]
    chosen = at.select(rows)
    dev = [r for r in rows if r["source"] in at.DEV_SOURCES]
    assert chosen["dev_rows"] == len(dev) and len(chosen["grid"]) == len(at.GRID_C) * len(at.GRID_THRESHOLD)
    for g in chosen["grid"]:
        assert sum(m["n"] for m in g["dev"].values()) == len(dev)
        assert g["dev_min"] == min(m[k] for m in g["dev"].values() for k in ("precision", "recall"))
    best = max(g["dev_min"] for g in chosen["grid"])
    first = next(g for g in chosen["grid"] if g["dev_min"] == best)
    assert (chosen["C"], chosen["threshold"]) == (first["C"], first["threshold"])
    w = load_weights()
    assert {"C", "threshold", "selection"} <= set(w) and w["threshold"] in at.GRID_THRESHOLD


@pytest.mark.slow  # encodes the 839 fresh-check phrasings and 106 held-back replies with e5 (about 45 s here)
def test_the_fresh_check_is_never_trained_on_and_its_figures_ship_with_the_weights():
    from dkilab.bench import abstention_train as at

    fresh = at.load_fresh_check()
    seen = {r["text"].strip().lower() for r in at.load_sources()}
    assert len(fresh) >= 280 and not [r["id"] for r in fresh if r["text"].strip().lower() in seen]
    assert {r["lang"] for r in fresh} == {"en", "zh"} and {r["abstains"] for r in fresh} == {True, False}
    shipped = load_weights()["figures"]["fresh_check"]
    measured = at.fresh_figures(get_detector("hybrid"), fresh)["all"]
    assert shipped == measured  # the weights' card says what the shipped detector does on it today
    # so do the figures on the held-back quickstart replies
    assert load_weights()["figures"]["held_back_model_replies"] == at.held_back_figures(get_detector("hybrid"))
    assert all(m["precision"] >= 0.9 and m["recall"] >= 0.9 for m in measured.values())
    # nor are its subjects: the templates' subjects added after round 7 appear in no fresh row
    import importlib.util

    spec = importlib.util.spec_from_file_location("build", at.FIXTURES / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    added = build.EN_SUBJECTS[16:] + build.ZH_SUBJECTS[16:]
    assert len(added) >= 80 and not [x for x in added if any(x.lower() in r["text"].lower() for r in fresh)]
    # and the people of the rules-9 sources (templated:absent_person, hard:person_did_not) are named in no fresh row
    people = build.EN_LIFE_PEOPLE + build.ZH_LIFE_PEOPLE
    assert len(people) >= 40 and not [x for x in people if any(x.lower() in r["text"].lower() for r in fresh)]


def test_weights_that_do_not_fit_the_design_say_so():
    w = dict(load_weights()) | {"coef": [0.0] * 771}  # version 1's width: answer + core vectors only
    with pytest.raises(ValueError, match="771 coefficients.*--train"):
        HybridDetector(weights=w).decide("That's beyond what I know, sorry.")


def test_the_judge_is_measured_on_the_fresh_check_and_cells_log_both_figures(monkeypatch, tmp_path, capsys):
    """`dkilab bench abstention --judge` scores the judge on a labelled sample and on the fresh check (the fair
    comparison: neither it nor the hybrid detector was trained on those rows), and the judge's card that cells
    log carries both. The judge here is a stand-in (a model call is not what is under test): it declines when
    the answer contains "not"."""
    from dkilab.bench import abstention as bench
    from dkilab.bench import abstention_train as at
    from dkilab.eval.scoring import judge as judge_mod
    from dkilab.eval.scoring.abstention import judge_card
    from dkilab.eval.scoring.judge import ABSTENTION_PROMPT

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    fresh = [r for i, r in enumerate(at.load_fresh_check()) if i % 10 == 0]
    monkeypatch.setattr(bench, "load_fresh_check", lambda: fresh)
    monkeypatch.setattr(bench, "load_model", lambda spec: None)
    monkeypatch.setattr(judge_mod.LLMJudge, "abstains", lambda self, q, a: (" not " in f" {a.lower()} " or None, "x"))
    assert judge_card("stand-in", ABSTENTION_PROMPT)["sample_figures"].startswith("not measured")
    sample = bench._sample(at.load_sources(), 1)
    bench._judge("stand-in", sample, get_detector("hybrid"))
    out = capsys.readouterr().out
    assert f"the fresh check, {len(fresh)} rows (neither was trained on them)" in out
    assert out.count("hybrid, same rows") == 2 and "judge replies naming neither label" in out
    card = judge_card("stand-in", ABSTENTION_PROMPT)
    assert {"sample_precision_en", "sample_recall_zh", "fresh_precision_en", "fresh_recall_zh"} <= set(card)
    expected = at._figures(fresh, [(" not " in f" {r['text'].lower()} ")
                                   or get_detector("hybrid").is_abstention(r["text"])
                                   for r in fresh])
    assert card["fresh_recall_en"] == expected["en"]["recall"]
    assert card["fresh_precision_zh"] == expected["zh"]["precision"]


def test_weights_fitted_under_other_rules_and_a_bad_fresh_row_say_which_file(tmp_path):
    from dkilab.bench.abstention_train import load_fresh_check
    from dkilab.text.abstention.rules import RULES_VERSION

    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(dict(load_weights()) | {"rules_version": "0"}))
    with pytest.raises(ValueError, match=f"stale.json.*rules version 0.*version {RULES_VERSION}.*--train"):
        load_weights(str(stale))
    bad = tmp_path / "fresh.jsonl"
    bad.write_text(json.dumps({"id": "f1", "lang": "en", "text": "No idea.", "abstains": True}) + "\n")
    with pytest.raises(ValueError, match="fresh.jsonl: row f1 has no 'round'"):
        load_fresh_check(bad)


def test_a_torn_vector_cache_is_encoded_again_not_fatal(monkeypatch, tmp_path, capsys):
    """The training design's e5 cache, cut short by a kill mid-write (as the old in-place write could leave it),
    is reported and rebuilt; the rebuilt cache is whole and written by rename."""
    import numpy as np
    from dkilab.bench import abstention_train as at

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path))
    texts = ["I have no record of that.", "Lisbon."]
    want = at._design(texts)
    (cache,) = (tmp_path / "abstention").glob("e5-passages-*.npz")
    cache.write_bytes(cache.read_bytes()[:100])  # torn
    again = at._design(texts)
    assert "unreadable" in capsys.readouterr().out and np.allclose(again, want)
    from dkilab.text.abstention.learned import views

    with np.load(cache) as z:  # every distinct view of each text, whole
        assert len(z["keys"]) == len({v for t in texts for v in views(t)}) >= 4
    assert not list((tmp_path / "abstention").glob("*.tmp.npz"))


def test_the_detector_is_fitted_on_written_phrasings_only_and_the_quickstart_replies_are_held_back(tmp_path):
    from dkilab.bench import abstention_train as at
    from dkilab.eval.harness.fitted import DETECTOR_SOURCES

    rows = at.load_sources()
    held = at.load_held_back()
    assert len(held) >= 100 and {r["abstains"] for r in held} == {True, False}
    seen = {r["text"].strip() for r in rows}
    assert not [r["id"] for r in held if r["text"].strip() in seen]  # the quickstart's replies are never fitted on
    trained = load_weights()["trained_on"]
    assert trained and all(s.startswith(DETECTOR_SOURCES) for s in trained)  # the shipped weights keep the declaration
    assert sum(trained.values()) == len(rows)
    assert set(load_weights()["figures"]["held_back_model_replies"]) == {"en", "zh"}
    # a source that is not a written phrasing is refused, naming the file and the row
    for name in ("phrasings.jsonl", "templated.jsonl"):
        (tmp_path / name).write_text((at.FIXTURES / name).read_text(encoding="utf-8"), encoding="utf-8")
    with (tmp_path / "templated.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"id": "m-1", "lang": "en", "text": "Luna.", "abstains": false, "source": "model:smollm2"}\n')
    with pytest.raises(ValueError, match=r"row m-1 has source 'model:smollm2'"):
        at.load_sources(tmp_path)
