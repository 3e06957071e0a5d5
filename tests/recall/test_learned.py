"""Learned fusion (issue 30): its candidates and features on a hand-made history against a real store (real
MiniLM vectors, real FTS5), the same features through a memory that only has the query tools (the recall
service's client), the per-encoder model file and its errors, the model's digest in a cell's identity,
and the trainer end to end on the bundled fixtures."""
import json
import math
from datetime import datetime, timezone

import numpy as np
import pytest
from dkilab.memory.store import index_text
from dkilab.recall import MultiSignalRecall, RecallConfig, learned
from dkilab.recall.reference import ReferenceResolver
from dkilab.types import Message

from tests.recall.test_levers import ASKED, HISTORY, m  # the same hand-made history

COL = {n: i for i, n in enumerate(learned.FEATURES)}
T0 = datetime(2023, 5, 1, 9, tzinfo=timezone.utc)


@pytest.fixture
def memory(store):
    store.add_messages(HISTORY)
    return store.for_user("alice")


def features(memory, question, asked_at=ASKED, **signals):
    """{message id: feature row} of learned fusion's candidates, and the recall result."""
    cfg = RecallConfig().with_updates({f"signals.{k}": v for k, v in ({"reference_enabled": False} | signals).items()})
    msr = MultiSignalRecall(cfg, None, memory)
    got = {}
    msr.on_candidates = lambda msgs, X: got.update({x.message_id: row for x, row in zip(msgs, X)})
    result = msr.recall(question, max_results=8, asked_at=asked_at)
    return got, result


def test_the_neighbours_of_the_top_hits_join_the_candidates_with_their_cosines(memory, embedder):
    rows, result = features(memory, "mushroom risotto", vector_enabled=False)
    assert {"m0", "m1", "m2"} <= set(rows)  # BM25 finds m1 alone; its session neighbours join
    assert result.ranked[0].signals.get("learned") is not None and "m2" in [r.message.message_id for r in result.ranked]
    q = embedder.encode_query("mushroom risotto")
    # each turn with the one it replies to is what a store embeds; the row reads its own and its neighbours' cosines
    before = {x.message_id: next((p for p in reversed(HISTORY[:k]) if p.session_id == x.session_id), None)
              for k, x in enumerate(HISTORY)}
    vec = {x.message_id: v for x, v in zip(HISTORY, embedder.encode([index_text(x, before[x.message_id])
                                                                     for x in HISTORY]))}
    assert rows["m2"][COL["cos"]] == pytest.approx(float(vec["m2"] @ q), abs=1e-4)
    assert rows["m2"][COL["prev_cos"]] == pytest.approx(float(vec["m1"] @ q), abs=1e-4)
    assert rows["m1"][COL["next_cos"]] == pytest.approx(float(vec["m2"] @ q), abs=1e-4)
    assert rows["m0"][COL["prev_cos"]] == rows["m0"][COL["cos"]]  # a session's first turn has none before it
    assert rows["m1"][COL["lex"]] == 1.0 and rows["m2"][COL["lex"]] == 0.0 and rows["m2"][COL["prev_lex"]] == 1.0


def test_length_is_a_share_of_the_other_candidates_not_an_absolute(memory):
    """`chars_share`: the share of the question's candidates shorter than the message (0 for the shortest),
    so the same message reads long among short turns and short among long answers."""
    rows, _ = features(memory, "What did we cook for dinner?")
    by_len = {i: len(m.content) for i, m in ((m.message_id, m) for m in HISTORY) if i in rows}
    for i, row in rows.items():
        assert row[COL["chars_share"]] == sum(v < by_len[i] for v in by_len.values()) / len(by_len)
    shortest = min(by_len, key=by_len.get)
    assert rows[shortest][COL["chars_share"]] == 0.0 and max(r[COL["chars_share"]] for r in rows.values()) < 1.0


def test_the_named_speaker_and_a_date_cue_are_features(memory):
    rows, _ = features(memory, "What did Ben cook for dinner?")
    assert rows["m3"][COL["speaker"]] == 1.0 and rows["m4"][COL["speaker"]] == -1.0
    rows, _ = features(memory, "What did we cook for dinner?")
    assert all(r[COL["speaker"]] == 0.0 for r in rows.values())  # no speaker named
    rows, _ = features(memory, "What did we cook for dinner last week?")  # 22-28 May
    assert rows["m4"][COL["date_cue"]] == 1.0 and rows["m4"][COL["in_window"]] == 1.0
    assert rows["m3"][COL["in_window"]] == 0.0 and rows["m3"][COL["log_days_off"]] > 0
    rows, _ = features(memory, "What did we cook for dinner?")
    assert all(r[COL["date_cue"]] == 0.0 for r in rows.values())


def test_the_reference_scope_is_a_feature_with_each_messages_rank_in_it(memory):
    """`in_scope`, `log_scope_rank`: the messages of the question's resolved scope ("just now" = the last 3
    turns, newest rank 0), 0 for the others and for every candidate of a question without a reference."""
    cfg = RecallConfig()
    msr = MultiSignalRecall(cfg, ReferenceResolver(), memory)
    got = {}
    msr.on_candidates = lambda msgs, X: got.update({x.message_id: row for x, row in zip(msgs, X)})
    result = msr.recall("What did you say about chess just now?", max_results=8, asked_at=ASKED)
    assert result.reference_scope == "last_1_3_turns" and result.reference_hits == 6
    scope = ["m7", "m6", "m5", "m4", "m3", "m2"]  # newest first
    assert set(scope) <= set(got)
    for rank, i in enumerate(scope):
        assert got[i][COL["in_scope"]] == 1.0 and got[i][COL["log_scope_rank"]] == pytest.approx(np.log1p(rank))
    assert all(row[COL["in_scope"]] == row[COL["log_scope_rank"]] == 0.0 for i, row in got.items() if i not in scope)
    rows, _ = features(memory, "What did Ben cook for dinner?", reference_enabled=True)
    assert all(row[COL["in_scope"]] == row[COL["log_scope_rank"]] == 0.0 for row in rows.values())


class ToolsOnly:
    """A memory with the query tools alone (as the recall service's client has them): no `similarities`,
    no `adjacent`, so learned fusion takes its fallbacks."""

    def __init__(self, view):
        self._view = view
        self.embedder = view.embedder

    def __getattr__(self, name):
        if name in ("similarities", "adjacent"):
            raise AttributeError(name)
        return getattr(self._view, name)


@pytest.mark.parametrize("question", ["mushroom risotto", "What did Ben cook for dinner last week?",
                                      "who plays chess?"])
def test_a_memory_with_only_the_query_tools_gets_the_same_features(memory, question):
    fast, a = features(memory, question)
    slow, b = features(ToolsOnly(memory), question)
    assert set(fast) == set(slow)
    for mid in fast:
        assert np.allclose(fast[mid], slow[mid], atol=1e-5), mid
    assert [r.message.message_id for r in a.ranked] == [r.message.message_id for r in b.ranked]


def test_the_scope_features_are_the_same_through_the_query_tools_alone(memory):
    """A question that carries a reference gets the same scope columns through a memory with the query tools
    alone (the recall service's client) as through the store."""
    rows = []
    for mem in (memory, ToolsOnly(memory)):
        msr = MultiSignalRecall(RecallConfig(), ReferenceResolver(), mem)
        got = {}
        msr.on_candidates = lambda msgs, X, got=got: got.update({x.message_id: row for x, row in zip(msgs, X)})
        msr.recall("What did you say about chess just now?", max_results=8, asked_at=ASKED)
        rows.append(got)
    fast, slow = rows
    assert set(fast) == set(slow) and sum(r[COL["in_scope"]] for r in fast.values()) == 6
    for mid in fast:
        assert np.allclose(fast[mid], slow[mid], atol=1e-5), mid


def test_the_store_keeps_each_users_turn_order_and_sees_new_turns(store):
    store.add_messages(HISTORY[:3])
    other = [Message("m1", "bob", "s0", 0, "user", "A different m1.", T0),
             Message("m9", "bob", "s0", 1, "user", "x", T0)]
    store.add_messages(other)
    alice, bob = store.for_user("alice"), store.for_user("bob")
    assert alice.adjacent(["m1", "m2"], reach=2) == {"m1": ("m0", None, "m2", None), "m2": ("m1", "m0", None, None)}
    assert bob.adjacent(["m1", "m0"]) == {"m1": (None, "m9")}  # bob's m1, not alice's; alice's m0 is not bob's
    store.add_messages([m(8, "And some wine.", "Ben", 0, session="s0")])  # appended: the cached order is renewed
    assert alice.adjacent(["m2"]) == {"m2": ("m1", "m8")}
    q = store.embedder.encode_query("risotto")
    assert set(alice.similarities(q, ["m1", "m9", "nope"])) == {"m1"}  # another user's and unknown ids left out


def test_the_model_of_the_stores_encoder_scores_and_a_bad_file_names_itself(tmp_path):
    n = len(learned.FEATURES)
    part = lambda c: {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.0] * (n - 1) + [c]}  # noqa: E731
    model = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm",
                                 "models": {"minilm": part(1.0), "e5": part(-1.0)}})
    X = np.zeros((2, n))
    X[:, -1] = [1.0, 2.0]
    assert list(model.score(X, "minilm")) == [1.0, 2.0] and list(model.score(X, "e5")) == [-1.0, -2.0]
    assert list(model.score(X, "other")) == [1.0, 2.0]  # the default part
    # the store's encoder decides; over the service (encoder unknown) the query's language, as `auto` would
    assert [model.part_for(e, "What do I like?") for e in ("offline:minilm-int8", "offline:e5", "hub/x", None)] == [
        "minilm", "e5", "minilm", "minilm"]
    assert model.part_for(None, "我喜欢什么？") == "e5" and model.part_for("offline:minilm", "我喜欢什么？") == "minilm"
    # parts per family and language: the question's language picks within the store's family
    lang = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm:en",
                                "models": {"minilm:en": part(1.0), "e5:en": part(2.0), "e5:zh": part(-1.0)}})
    assert [lang.part_for("offline:e5", q) for q in ("What do I like?", "我喜欢什么？")] == ["e5:en", "e5:zh"]
    assert [lang.part_for(None, q) for q in ("What do I like?", "我喜欢什么？")] == ["minilm:en", "e5:zh"]
    assert lang.part_for("offline:minilm", "我喜欢什么？") == "minilm:en"  # the family's only part, any language
    assert lang.part_for("hub/x", "我喜欢什么？") == "minilm:en"  # an unknown encoder: the default part
    # the fine-tuned MiniLM is a family of its own (its cosines sit at other levels); stock builds are `minilm`
    assert [learned.family(e) for e in ("offline:minilm-locomo", "offline:minilm", "offline:minilm-int8")] == [
        "minilm-locomo", "minilm", "minilm"]
    tuned = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm",
                                 "models": {"minilm": part(1.0), "minilm-locomo": part(3.0)}})
    assert [tuned.part_for(e, "What do I like?") for e in ("offline:minilm-locomo", "offline:minilm", None)] == [
        "minilm-locomo", "minilm", "minilm"]
    assert model.part_for("offline:minilm-locomo", "What do I like?") == "minilm"  # a model without its part
    bad = {"missing.json": None, "garbled.json": "{not json", "no_models.json": {"features": list(learned.FEATURES)},
           "features.json": {"features": ["cos", "made_up"], "models": {"en": part(1.0)}},
           "shape.json": {"features": list(learned.FEATURES), "models": {"en": {"mean": [0], "scale": [1],
                                                                                "coef": [1]}}}}
    for name, content in bad.items():
        path = tmp_path / name
        if content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(ValueError, match=name):
            learned.load_model(path)
        with pytest.raises(ValueError, match=rf"fusion_model.*{name}"):  # refused when the config is read
            RecallConfig().with_updates({"signals.fusion_model": str(path)})


def test_a_conversational_cue_takes_the_utterance_part_and_a_question_never_does():
    """A turn that is not a question (MADial-Bench's cues) is ranked by its family's `utterance` part; a question
    keeps the question parts, and the fallback of a family without a question part is the default part, not the
    cue part."""
    assert [learned.cue_kind(q) for q in ("When did I go?", "我去了哪里？", 'She said "why?"', "Was it May? ",
                                           "我穿的是什么牌子？\nA. 耐克\nB. 李宁\n请只回答一个选项的字母。",
                                           "How many months passed between the two adoptions",
                                           "I practise every day. How should I celebrate?")] == ["question"] * 7
    assert [learned.cue_kind(q) for q in ("I'm looking forward to that evening!", "我特别期待那天晚上。", "ok")] == [
        "utterance"] * 3
    # without a "?": a question word or an auxiliary before its subject asks; chatter that starts like one does not
    asks = ("Did Caroline go to the museum", "have you seen my keys", "Didn't you say it was May", "Is the shop open",
            "Can anyone come", "Where did I put it", "How should I celebrate. I practise every day",
            "你还记得我上次说的那家店吗", "你记得吗。我们去过的")
    chatter = ("Have a great day", "Had the best time at the lake.", "Will do, thanks", "Can't wait for Sunday",
               "What a day.", "How lovely!", "Did it!", "Has been a long week", "When I was young we had a dog!",
               "我觉得自己什么都做不好。", "舅舅会做蛋糕，他还教过我呢！", "吗啡是一种药")
    assert [learned.cue_kind(q) for q in asks] == ["question"] * len(asks)
    assert [learned.cue_kind(q) for q in chatter] == ["utterance"] * len(chatter)
    n = len(learned.FEATURES)
    part = {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.0] * n}
    model = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm",
                                 "models": {k: part for k in ("minilm", "minilm:utterance", "e5", "e5:utterance")}})
    cue, question = "I can't wait for the weekend!", "What did I do last weekend?"
    assert [model.part_for("offline:minilm", q) for q in (cue, question)] == ["minilm:utterance", "minilm"]
    assert [model.part_for("offline:e5", q) for q in ("我好想去海边。", "我去了哪里？")] == ["e5:utterance", "e5"]
    assert model.part_for(None, "我好想去海边。") == "e5:utterance"  # over the service: the language picks the family
    only_cues = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm",
                                     "models": {"minilm": part, "e5:utterance": part}})
    assert [only_cues.part_for("offline:e5", q) for q in ("我去了哪里？", "我好想去海边。")] == ["minilm",
                                                                                    "e5:utterance"]
    # a model without cue parts (the ablation models before them) ranks a cue as before
    plain = learned.FusionModel({"features": list(learned.FEATURES), "default": "minilm", "models": {"minilm": part}})
    assert plain.part_for("offline:minilm", cue) == "minilm"
    shipped = learned.load_model()
    assert [shipped.part_for("offline:minilm", q) for q in (cue, question)] == ["minilm:utterance", "minilm"]
    trained_on = shipped.card()["trained_on"]
    assert "madial_bench_en" in trained_on["minilm:utterance"] and "madial_bench_zh" in trained_on["e5:utterance"]
    assert "madial" not in trained_on["minilm"] + trained_on["e5"]


def test_recall_ranks_a_cue_with_the_utterance_part_and_a_question_with_the_question_part(memory, tmp_path):
    """Through MultiSignalRecall on a real store: a model whose question part puts long turns first and whose
    cue part puts short turns first orders the same candidates the two ways, by what is asked."""
    n = len(learned.FEATURES)
    part = lambda c: {"mean": [0.0] * n, "scale": [1.0] * n,  # noqa: E731
                      "coef": [c if f == "chars_share" else 0.0 for f in learned.FEATURES]}
    path = tmp_path / "cues.json"
    path.write_text(json.dumps({"features": list(learned.FEATURES), "default": "minilm",
                                "models": {"minilm": part(1.0), "minilm:utterance": part(-1.0)}}))

    def lengths(query):
        _, result = features(memory, query, fusion_model=str(path))
        return [len(r.message.content) for r in result.ranked]

    asked, said = lengths("What was the mushroom risotto like?"), lengths("That mushroom risotto was lovely.")
    assert asked == sorted(asked, reverse=True) and said == sorted(said) and asked[0] > said[0]


def test_the_fusion_model_is_part_of_a_cells_identity(tmp_path, monkeypatch):
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

    shipped = json.loads(learned.DEFAULT_MODEL.read_text())
    retrained = json.loads(json.dumps(shipped))
    retrained["models"]["minilm"]["coef"][0] += 0.5
    (tmp_path / "retrained.json").write_text(json.dumps(retrained))
    (tmp_path / "same.json").write_text(json.dumps(shipped | {"version": "copy"}))

    def cell(**signals):
        cfg = experiment_from_dict({"name": "x", "datasets": [{"name": "fixtures"}], "tracing": False,
                                    "strategies": [{"name": "recall_only",
                                                    "params": {"recall": {"signals": signals}}}]})
        return expand_cells(cfg)[0]

    shipped_cell = cell()
    assert shipped_cell.identity["strategy_identity"]["fusion_model"] == learned.load_model().digest
    assert cell(fusion_model=str(tmp_path / "retrained.json")).config_hash != shipped_cell.config_hash
    # the same weights under another version name: another file, but the digest is of the weights
    assert (cell(fusion_model=str(tmp_path / "same.json")).identity["strategy_identity"]["fusion_model"]
            == shipped_cell.identity["strategy_identity"]["fusion_model"])
    assert "fusion_model" not in cell(fusion="weighted").identity["strategy_identity"]
    # the cue rule's version is part of the digest: a cell recalled under another rule is not read back
    data = json.loads(learned.DEFAULT_MODEL.read_text())
    before = learned.FusionModel(data).digest
    monkeypatch.setattr(learned, "ROUTING", learned.ROUTING + "-changed")
    assert learned.FusionModel(data).digest != before
    monkeypatch.undo()
    # so are the date rules (they feed the date features), and under temporal_focus they are part of the cell
    focused, weighted = cell(fusion="weighted", temporal_focus=0.3), cell(fusion="weighted")
    assert "date_rules" in focused.identity["strategy_identity"]
    assert "date_rules" not in weighted.identity["strategy_identity"]
    monkeypatch.setattr(learned, "DATE_RULES", "dates-changed")
    from dkilab.recall import temporal

    monkeypatch.setattr(temporal, "RULES", "dates-changed")
    assert learned.FusionModel(data).digest != before
    assert cell(fusion="weighted", temporal_focus=0.3).config_hash != focused.config_hash
    assert cell(fusion="weighted").config_hash == weighted.config_hash  # no date window read: the same cell


def test_the_trainer_fits_one_part_per_encoder_family_and_dataset_language():
    """A family with enough questions in two languages gets a part per language (`e5:en`, `e5:zh`), else one
    part named by the family; a dataset counts in the language of most of its questions (a stray
    English-looking question of a Chinese dataset is not an English question); a small language joins its
    family's largest part."""
    from dkilab.bench import fusion_train

    def rows(dataset, family, langs):
        return [{"dataset": dataset, "family": family, "language": lang, "qid": f"{dataset}:{family}:{k}"}
                for k, lang in enumerate(langs)]

    locomo_m = rows("locomo", "minilm", ["en"] * 5)
    locomo_e = rows("locomo", "e5", ["en"] * 5)
    memdaily = rows("memdaily", "e5", ["zh"] * 4 + ["en"])  # one question detected English
    tiny = rows("tiny_zh", "minilm", ["zh"] * 2)
    got = fusion_train.parts(locomo_m + locomo_e + memdaily + tiny, min_questions=4)
    assert {k: len(v) for k, v in got.items()} == {"minilm": 7, "e5:en": 5, "e5:zh": 5}
    assert all(r["dataset"] == "memdaily" for r in got["e5:zh"]) and tiny[0] in got["minilm"]
    assert {k: len(v) for k, v in fusion_train.parts(locomo_e + memdaily, min_questions=6).items()} == {"e5": 10}
    # the shipped question parts
    assert set(fusion_train.parts(locomo_m + memdaily, min_questions=4)) == {"minilm", "e5"}
    # a dataset of conversational cues (mostly) fits its family's utterance part, any language, if it has enough
    cues = [r | {"kind": "utterance"} for r in rows("madial_en", "minilm", ["en"] * 3)]
    cues += [r | {"kind": "question"} for r in rows("madial_en", "minilm", ["en"])]  # a cue that ends with "?"
    cues += [r | {"kind": "utterance"} for r in rows("madial_zh", "e5", ["zh"] * 2)]
    got = fusion_train.parts(locomo_m + memdaily + cues, min_questions=4, min_cues=3)
    assert {k: len(v) for k, v in got.items()} == {"minilm": 5, "e5": 7, "minilm:utterance": 4}
    assert all(r["dataset"] == "madial_zh" for r in got["e5"] if r not in memdaily)  # too few cues: question parts
    assert {r["dataset"] for r in got["minilm:utterance"]} == {"madial_en"}
    # without cue parts (the ablation model): the same question parts, the cues that had a part left out
    plain = fusion_train.parts(locomo_m + memdaily + cues, min_questions=4, min_cues=3, cue_parts=False)
    assert plain == {k: v for k, v in got.items() if k != "minilm:utterance"}


def test_the_trainer_never_fits_on_the_dev_rows_an_encoder_was_fine_tuned_on(tmp_path, monkeypatch):
    """LoCoMo dev rows of `offline:minilm-locomo` stores (an encoder trained on those questions: in-sample
    cosines) are left out, and its question part is the one its study fitted out of fold, for this very
    adapter and index text; anything else is an error that names the file. Other rows are kept."""
    from dkilab.bench import fusion_train
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, weights_digest

    n = len(learned.FEATURES)
    part = {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.5] * n, "adapter": weights_digest(LOCOMO_EMBEDDER),
            "index_text": "1",
            "trained_on": "locomo dev (760 questions), out of fold on offline:minilm-locomo stores, index text v1"}
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"models": {"minilm-locomo": part}}))
    monkeypatch.setattr(fusion_train, "FITTED_OUT_OF_FOLD", {LOCOMO_EMBEDDER: ("locomo", str(study))})

    def row(dataset, model, k):
        return {"dataset": dataset, "model": model, "family": learned.family(model), "index_text": "1", "qid": str(k)}
    rows = [row("locomo", LOCOMO_EMBEDDER, 0), row("locomo", LOCOMO_EMBEDDER, 1), row("locomo", "offline:minilm", 2),
            row("madial_bench_en", LOCOMO_EMBEDDER, 3)]
    said: list[str] = []
    kept, parts = fusion_train._out_of_fold_parts(rows, said.append)
    assert [r["qid"] for r in kept] == ["2", "3"] and parts == {"minilm-locomo": part}
    assert "not refitted" in said[0] and str(study.name) in said[0]
    for change, error in (({"adapter": "0" * 16}, "fitted for adapter 0000"), ({"index_text": "2"}, "other stores")):
        study.write_text(json.dumps({"models": {"minilm-locomo": {**part, **change}}}))
        with pytest.raises(ValueError, match=error):
            fusion_train._out_of_fold_parts(rows)
    study.unlink()
    with pytest.raises(ValueError, match=f"finetune_encoder_dev.*{study}"):
        fusion_train._out_of_fold_parts(rows)
    assert fusion_train._out_of_fold_parts(rows[2:3]) == (rows[2:3], {})  # nothing fine-tuned: nothing borrowed


def test_the_trainer_neither_builds_nor_recalls_the_dev_stores_whose_rows_it_would_drop(tmp_path, monkeypatch):
    """`train` collects with stand-ins: a cell whose encoder was fine-tuned on its dataset yields one row without
    features (no store is built, no question recalled), and that row still borrows the study's part; `collect`
    without them (the studies) recalls the cell as before."""
    from dkilab.bench import fusion_train
    from dkilab.encoders.embedder import E5_EMBEDDER

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    n = len(learned.FEATURES)
    study = tmp_path / "study.json"  # e5 stands in for a fine-tuned encoder: the fixtures are an e5 dataset
    study.write_text(json.dumps({"models": {"e5": {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.1] * n,
                                                   "index_text": "2", "adapter": None}}}))
    monkeypatch.setattr(fusion_train, "FITTED_OUT_OF_FOLD", {E5_EMBEDDER: ("fixtures", str(study))})
    monkeypatch.setattr("dkilab.encoders.embedder.weights_digest", lambda model: None)
    rows = fusion_train.collect(None, datasets=[{"name": "fixtures"}], stand_ins=True)
    assert rows == [{"dataset": "fixtures", "model": E5_EMBEDDER, "stand_in": True, "index_text": "2", "family": "e5"}]
    assert not list((tmp_path / "cache").rglob("*.sqlite*"))  # no store was built
    assert fusion_train._out_of_fold_parts(rows, lambda _: None) == ([],
                                                                     {"e5": json.loads(study.read_text())["models"][
                                                                         "e5"]})
    assert len(fusion_train.collect(None, datasets=[{"name": "fixtures"}])) > 1  # without stand-ins: recalled
    assert list((tmp_path / "cache").rglob("*.sqlite*"))  # ... on a store it built


def test_c_is_the_strongest_regularisation_within_one_standard_error_of_the_best():
    """A near-tie the folds cannot resolve goes to the smaller C (it transferred better to the held-out work
    sessions: docs/retrieval.md); a lead larger than the folds' standard error keeps the best C."""
    from dkilab.bench.fusion_train import one_standard_error

    folds = [0.70, 0.75, 0.72, 0.78, 0.73]  # the best C's objective per fold: standard error 0.0136
    near_tie = {0.01: 0.725, 0.1: 0.733, 1.0: 0.734}
    assert one_standard_error(near_tie, folds) == (0.01, 1.0, pytest.approx(0.0136, abs=1e-4))
    assert one_standard_error({0.01: 0.70, 0.1: 0.725, 1.0: 0.734}, folds)[0] == 0.1
    assert one_standard_error({0.01: 0.70, 0.1: 0.71, 1.0: 0.734}, folds)[0] == 1.0
    assert one_standard_error({0.01: 0.70, 0.1: 0.71, 1.0: 0.734}, [0.734])[0] == 1.0  # one fold: no error, the best
    from dkilab.bench.fusion_train import choose_c

    with pytest.raises(ValueError, match="unknown C rule 'median'"):
        choose_c([], rule="median")  # a misspelt rule fails before any fit


def test_the_trainer_fits_a_model_recall_can_load(tmp_path, monkeypatch):
    """`dkilab bench retrieval --train` end to end on the bundled fixtures (English and Chinese questions of
    four users): features collected through recall itself, C chosen by cross-validation over users, a model
    written that a config can name and that ranks."""
    from dkilab.bench import fusion_train

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "model.json"
    lines = []
    model = fusion_train.train(out=out, echo=lines.append, datasets=[{"name": "fixtures"}])
    assert set(model["models"]) == {"e5"} and model["models"]["e5"]["C"] in fusion_train.CS  # bilingual: e5 stores
    assert any("cross-validated" in line for line in lines) and f"wrote {out}" in lines[-1]
    assert any(line.startswith("  chose C=") and "cross-validated objective" in line for line in lines)
    loaded = learned.load_model(out)
    assert loaded.digest != learned.load_model().digest
    assert loaded.guard is not None and any(line.startswith("guard: the ranges of") for line in lines)  # by default
    rows = fusion_train.collect(None, datasets=[{"name": "fixtures"}])
    assert rows and all(r["X"].shape == (len(r["ids"]), len(learned.FEATURES)) for r in rows)
    assert sum(bool(r["gold"] & set(r["ids"])) for r in rows) >= 0.8 * len(rows)  # evidence is among the candidates
    # a study of another candidate list (experiments/bench/recall_levers_dev.py): each signal's top 2 only
    narrow = fusion_train.collect(None, datasets=[{"name": "fixtures"}],
                                  recall={"signals.vector_top_k": 2, "signals.lexical_top_k": 2})
    assert [r["qid"] for r in narrow] == [r["qid"] for r in rows]
    assert sum(len(r["ids"]) for r in narrow) < sum(len(r["ids"]) for r in rows)


def same_part(a: dict, b: dict) -> bool:
    """Two fitted parts are the same fit: every weight, the intercept and the scaler's means and scales equal to
    1e-9 of the larger. Fits of the same rows in separate runs agree to about 1e-13, not bit for bit (each
    ablation model is its own `--train` run); a refit on other rows moves weights by 1e-3 or more."""
    pairs = [*(pair for key in ("coef", "mean", "scale") for pair in zip(a[key], b[key], strict=True)),
             (a["intercept"], b["intercept"])]
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in pairs)


def test_the_english_e5_ablation_model_differs_from_the_shipped_one_only_by_its_english_e5_part():
    """experiments/models/fusion_lr_e5_english.json (`--train --english-e5-part`) keeps the shipped MiniLM part,
    the shipped e5 part (as `e5:zh`) and the two parts for conversational cues (`same_part`), adds `e5:en`,
    and routes questions by their language on an e5 store; the shipped model routes both languages to its one
    e5 part."""
    shipped = json.loads(learned.DEFAULT_MODEL.read_text())["models"]
    path = learned.ROOT / "experiments" / "models" / "fusion_lr_e5_english.json"
    ablation = json.loads(path.read_text())["models"]
    cues = {"minilm:utterance", "e5:utterance"}
    tuned = {"minilm-locomo", "minilm-locomo:utterance"}  # the fine-tuned English encoder's (no e5 store's)
    assert set(ablation) == {"minilm", "e5:en", "e5:zh", *cues} and set(shipped) == {"minilm", "e5", *cues, *tuned}
    assert same_part(ablation["minilm"], shipped["minilm"]) and same_part(ablation["e5:zh"], shipped["e5"])
    assert all(same_part(ablation[k], shipped[k]) for k in cues)
    assert not same_part(ablation["e5:en"], shipped["e5"])
    model = learned.load_model(path)
    assert [model.part_for("offline:e5", q) for q in ("Where did I go?", "我去了哪里？")] == ["e5:en", "e5:zh"]
    assert {learned.load_model().part_for("offline:e5", q) for q in ("Where did I go?", "我去了哪里？")} == {"e5"}


def test_the_ablation_model_without_cue_parts_keeps_the_shipped_question_parts_and_ranks_cues_with_them():
    """experiments/models/fusion_lr_no_cue_parts.json (`--train --no-cue-parts`) is the shipped model without
    its parts for conversational cues: the question parts (`same_part`), and a cue takes the question part."""
    shipped = json.loads(learned.DEFAULT_MODEL.read_text())
    path = learned.ROOT / "experiments" / "models" / "fusion_lr_no_cue_parts.json"
    ablation = json.loads(path.read_text())
    questions = ("minilm-locomo", "minilm", "e5")
    assert set(ablation["models"]) == set(questions) and ablation["default"] == shipped["default"]
    assert all(same_part(ablation["models"][k], shipped["models"][k]) for k in questions)
    model, cue = learned.load_model(path), "I'm really looking forward to that evening!"
    encoders = ("offline:minilm-locomo", "offline:minilm", "offline:e5")
    assert [model.part_for(enc, cue) for enc in encoders] == list(questions)
    assert [learned.load_model().part_for(enc, cue) for enc in encoders] == [f"{k}:utterance" for k in questions]


def test_the_cue_kinds_script_counts_every_question_of_a_dataset(tmp_path):
    """`python experiments/bench/cue_kinds.py --datasets fixtures` prints the rule's version and how the bundled
    fixtures' questions sort (all 48 are questions), from a fresh process."""
    import subprocess
    import sys

    script = learned.ROOT / "experiments" / "bench" / "cue_kinds.py"
    out = subprocess.run([sys.executable, str(script), "--datasets", "fixtures", "--show", "1"], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    assert out.splitlines()[0] == f"cue rule {learned.ROUTING}"
    assert out.splitlines()[2].split() == ["fixtures", "48", "0"]


def test_the_shipped_model_carries_a_guard_that_hands_back_the_weighted_order(memory, tmp_path):
    """The shipped model carries a range guard (`--train`); experiments/models/fusion_lr_unguarded.json
    (`--train --no-guard`) holds its parts (`same_part`) and no guard. A question whose candidates lie
    outside a guard gets the weighted fusion's order (same ids, same scores, no `learned` score); inside it, the
    model's. The guard is in the model's digest."""
    guarded = json.loads(learned.DEFAULT_MODEL.read_text())
    shipped = json.loads((learned.ROOT / "experiments" / "models" / "fusion_lr_unguarded.json").read_text())
    assert guarded["models"].keys() == shipped["models"].keys()
    assert all(same_part(guarded["models"][k], shipped["models"][k]) for k in shipped["models"])
    assert 0.0 < guarded["guard"]["limit"] < 1.0 and learned.load_model().guard is not None and "guard" not in shipped

    def ranked(model: dict, question="What did Ben cook for dinner?", **signals):
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps(model))
        return features(memory, question, fusion_model=str(path), **signals)[1].ranked

    n = len(learned.FEATURES)
    never = {**shipped, "guard": {"lo": [-1e9] * n, "hi": [1e9] * n, "limit": 0.0}}
    always = {**shipped, "guard": {"lo": [1e9] * n, "hi": [1e9] * n, "limit": 0.0}}
    plain = ranked(shipped)
    assert [(r.message.message_id, r.score) for r in ranked(never)] == [(r.message.message_id, r.score) for r in plain]
    weighted = ranked(shipped, fusion="weighted")
    handed = ranked(always)
    assert [(r.message.message_id, r.score) for r in handed] == [(r.message.message_id, r.score) for r in weighted]
    assert all("learned" not in r.signals for r in handed) and all("learned" in r.signals for r in plain)
    digests = {learned.FusionModel(m).digest for m in (shipped, never, always)}
    assert len(digests) == 3
    with pytest.raises(ValueError, match="guard is malformed"):
        learned.FusionModel({**shipped, "guard": {"lo": [0.0] * n}}, "m.json")
    with pytest.raises(ValueError, match="limit in"):
        learned.FusionModel({**shipped, "guard": {"lo": [0.0] * n, "hi": [0.0] * n, "limit": 2}}, "m.json")


def test_a_model_without_a_feature_gives_it_zero_weight_and_says_so():
    """A model fitted before a feature existed (a new recall signal) still loads: that feature gets zero weight,
    a warning names it and the card lists it; its guard never calls that feature outside. A feature dkilab does
    not compute is refused, naming it."""
    shipped = json.loads(learned.DEFAULT_MODEL.read_text())
    gone = ("keyword_share", "z_next_cos")
    keep = [i for i, f in enumerate(learned.FEATURES) if f not in gone]
    old = {**shipped, "features": [learned.FEATURES[i] for i in keep],
           "models": {k: {**v, **{f: [v[f][i] for i in keep] for f in ("mean", "scale", "coef")}}
                      for k, v in shipped["models"].items()},
           "guard": {"lo": [0.0] * len(keep), "hi": [0.0] * len(keep), "limit": 0.5}}
    with pytest.warns(UserWarning, match="keyword_share, z_next_cos: they get zero weight"):
        model = learned.FusionModel(old, "old.json")
    assert model.card()["unfitted_features"] == list(gone)
    zeroed = json.loads(json.dumps(shipped))
    for part in zeroed["models"].values():
        for f in gone:
            part["coef"][learned.FEATURES.index(f)] = 0.0
    X = np.random.default_rng(0).normal(size=(12, len(learned.FEATURES)))
    for part in model.parts:
        assert np.allclose(model.score(X, part), learned.FusionModel(zeroed).score(X, part))
    assert model.guard is not None and model.guard.share(np.zeros((1, len(learned.FEATURES)))) == 0.0
    with pytest.raises(ValueError, match="does not compute: made_up"):
        learned.FusionModel({**shipped, "features": [*learned.FEATURES, "made_up"]}, "new.json")


def test_the_encoder_study_refuses_writing_without_the_adapters_rank_before_any_work(tmp_path):
    """`finetune_encoder_dev.py --fusion-only` (or `--write`) without `--lora` stops at once with one line,
    not after its 20-minute folds."""
    import subprocess
    import sys

    script = learned.ROOT / "experiments" / "bench" / "finetune_encoder_dev.py"
    for flag in ("--fusion-only", "--write"):
        out = subprocess.run([sys.executable, str(script), flag], capture_output=True, text=True, cwd=tmp_path,
                             timeout=120)
        assert out.returncode == 2 and "give its --lora R" in out.stderr.strip().splitlines()[-1]


def test_train_takes_a_studys_part_for_the_datasets_it_lists_and_refuses_fitting_it_on_any_other(tmp_path, monkeypatch):
    """A part borrowed from an encoder's study (`FITTED_OUT_OF_FOLD`) is never refitted by `--train`: dev rows
    of a dataset its `datasets` lists are in its fit already (a line says so); rows of any other dataset that
    would fit that part are refused, naming both."""
    import numpy as np
    from dkilab.bench import fusion_train
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, weights_digest

    n = len(learned.FEATURES)
    part = {"mean": [0.0] * n, "scale": [1.0] * n, "coef": [0.5] * n, "adapter": weights_digest(LOCOMO_EMBEDDER),
            "index_text": "1", "trained_on": "locomo, worksessions dev", "datasets": ["locomo", "worksessions"]}
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"models": {"minilm-locomo": part}}))
    monkeypatch.setattr(fusion_train, "FITTED_OUT_OF_FOLD", {LOCOMO_EMBEDDER: ("locomo", str(study))})
    rng = np.random.default_rng(0)

    def rows(dataset):
        return [{"dataset": dataset, "model": LOCOMO_EMBEDDER, "family": "minilm-locomo", "index_text": "1",
                 "user": f"u{k}", "qid": f"{dataset}{k}", "ids": [f"m{i}" for i in range(6)],
                 "X": rng.normal(size=(6, n)), "gold": {"m0"}, "language": "en", "kind": learned.QUESTION,
                 "query": "Which port?"} for k in range(3)]
    stand_in = {"dataset": "locomo", "model": LOCOMO_EMBEDDER, "stand_in": True, "index_text": "1",
                "family": "minilm-locomo"}
    for dataset, ok in (("worksessions", True), ("other_en", False)):
        monkeypatch.setattr(fusion_train, "collected", lambda d, emb, spec, echo=print, dataset=dataset, **kw: (
            [stand_in] if spec["name"] == "locomo" else rows(dataset)) if emb.get("english") is None else [])
        monkeypatch.setattr(fusion_train, "dataset_info", lambda name, path=None: {"language": "zh"})
        said: list[str] = []
        specs = [{"name": "locomo"}, {"name": dataset}]
        if ok:
            model = fusion_train.train(out=tmp_path / "m.json", echo=said.append, datasets=specs)
            assert model["models"]["minilm-locomo"] == part
            assert "minilm-locomo: worksessions dev are in its study's fit too" in said
        else:
            with pytest.raises(ValueError, match=r"'minilm-locomo' would be fitted on dev data \(other_en\)"):
                fusion_train.train(out=tmp_path / "m.json", echo=said.append, datasets=specs)
