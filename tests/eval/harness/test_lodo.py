"""Leave-one-dataset-out (issue 59): a held-out source's dev rows never fit the model that scores its test
split, MADial-Bench's two languages are one source, and the robust pipelines (rank fusion, the range guard)
do what they say, on synthetic candidate rows."""
from __future__ import annotations

import numpy as np
import pytest
from dkilab.bench import lodo
from dkilab.recall import learned

N = len(learned.FEATURES)
GOOD, FUSED_RANK = learned.FEATURES.index("cos"), learned.FEATURES.index("log_fused_rank")


def _rows(dataset: str, split: str, users: int, sign: float, seed: int, model: str = "offline:minilm",
          query: str = "What did she say?") -> list[dict]:
    """Questions of 12 candidates whose `cos` feature marks the gold one (sign 1) or hides it (sign -1); the
    hand-weighted order puts the gold candidate third."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(users):
        for q in range(6):
            X = rng.normal(size=(12, N))
            gold = int(rng.integers(12))
            X[gold, GOOD] += 5.0 * sign
            order = [i for i in range(12) if i != gold]
            order.insert(2, gold)
            X[:, FUSED_RANK] = np.log1p(np.argsort(order))
            ids = [f"{dataset}-{u}-{q}-{i}" for i in range(12)]
            out.append({"dataset": dataset, "user": f"{split}{u}", "qid": f"{dataset}:{split}:{u}:{q}", "ids": ids,
                        "X": X, "gold": {ids[gold]}, "family": learned.family(model), "model": model,
                        "language": "en", "kind": learned.QUESTION, "query": query, "index_text": "1"})
    return out


def test_madial_bench_languages_are_one_source():
    assert lodo.source("madial_bench_en") == lodo.source("madial_bench_zh") == "madial_bench"
    assert lodo.source("locomo") == "locomo" and lodo.source("memdaily") == "memdaily"


def test_a_held_out_source_never_fits_the_model_that_scores_it(monkeypatch):
    """MemDaily's own dev rows would teach the model the opposite of what the other sources teach (gold
    hidden by `cos`): a model fitted with them would rank its test split worse, and the held-out pipelines
    rank it well. Each test dataset gets every pipeline, one row per question, keyed like the runner's rows."""
    dev = _rows("locomo", "dev", 6, 1.0, 1) + _rows("madial_bench_en", "dev", 6, 1.0, 2)
    dev += _rows("memdaily", "dev", 6, -1.0, 3) + _rows("madial_bench_zh", "dev", 6, 1.0, 4)
    test = _rows("memdaily", "test", 5, 1.0, 5) + _rows("madial_bench_zh", "test", 5, 1.0, 6)
    said: list[str] = []
    fitted: list[set[str]] = []  # the datasets of every fit, in order (memdaily's held out first)
    fit = lodo._fit_best
    monkeypatch.setattr(lodo, "_fit_best", lambda rows, *a: fitted.append({r["dataset"] for r in rows})
                        or fit(rows, *a))
    got = lodo.score_held_out(dev, test, said.append)
    assert fitted and all("memdaily" not in f for f in fitted[:len(fitted) // 2])
    assert all(not any(d.startswith("madial") for d in f) for f in fitted[len(fitted) // 2:])
    assert set(got) == {"memdaily", "madial_bench_zh"}
    assert all(set(by) == set(lodo.PIPELINES) and all(len(rs) == 30 for rs in by.values()) for by in got.values())
    mean = {ds: {p: np.mean([r["recall_at_1"] for r in rs]) for p, rs in by.items()} for ds, by in got.items()}
    assert mean["memdaily"]["lodo_pooled"] > 0.9 and mean["memdaily"]["lodo_parts"] > 0.9
    # MADial-Bench zh held out: its English half (same source) is left out too
    assert any("held out madial_bench: fitting on locomo, memdaily dev" in s for s in said)
    assert {r["qid"] for r in got["memdaily"]["weighted"]} == {r["qid"] for r in test if r["dataset"] == "memdaily"}
    # the hand-weighted order puts the gold third: recall@1 0, recall@5 1
    assert mean["memdaily"]["weighted"] == 0.0
    assert np.mean([r["recall_at_5"] for r in got["memdaily"]["weighted"]]) == 1.0


def test_rank_fusion_and_the_range_guard():
    a, b = np.array([0, 1, 2, 3]), np.array([3, 2, 1, 0])
    assert list(lodo.rrf(a, a)) == [0, 1, 2, 3]
    assert set(lodo.rrf(a, b)[:2]) == {0, 3}  # both ends tie: each is first in one order
    train = _rows("locomo", "dev", 5, 1.0, 7)
    guard = learned.RangeGuard.fit([r["X"] for r in train])
    assert sum(guard.outside(r["X"]) for r in train) <= 2  # ~1% of 30 training questions
    assert guard.outside(train[0]["X"] * 50)


def test_the_metric_row_reads_the_top_twenty_as_an_answer_holds():
    row = {"qid": "q", "user": "u", "ids": [f"m{i}" for i in range(30)], "gold": {"m25", "m1"}}
    got = lodo.metric_row(row, np.arange(30))
    assert got["recall_at_10"] == 0.5 and got["mrr"] == 0.5 and got["recall_at_20"] == 0.5
    assert got["qid"] == "q" and got["user_id"] == "u"
    assert lodo.metric_row(row, np.arange(30)[::-1])["recall_at_10"] == pytest.approx(0.5)  # m25 is 5th


def test_collected_features_are_cached_per_dataset_file_version_and_a_bad_cache_file_is_collected_again(
        tmp_path, monkeypatch):
    """The feature cache is keyed by the dataset's files: editing a normalised file under the same name
    collects again; a truncated cache file is collected again with a line saying so, never raised."""
    from dkilab.bench import fusion_train

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data"
    (data / "locomo").mkdir(parents=True)
    src = data / "locomo" / "locomo10.json"
    src.write_text("[1]")
    calls: list[int] = []
    monkeypatch.setattr(fusion_train, "collect", lambda *a, **k: calls.append(1) or [{"qid": f"q{len(calls)}"}])
    said: list[str] = []
    spec = {"name": "locomo", "split": "test"}
    first = fusion_train.collected(str(data), {"model": "auto"}, spec, said.append)
    assert fusion_train.collected(str(data), {"model": "auto"}, spec, said.append) == first and len(calls) == 1
    src.write_text("[1, 2]")  # the dataset changed under the same name
    assert fusion_train.collected(str(data), {"model": "auto"}, spec, said.append) == [{"qid": "q2"}]
    (cached,) = [p for p in (tmp_path / "cache" / "features").iterdir() if p.stat().st_mtime_ns == max(
        q.stat().st_mtime_ns for q in (tmp_path / "cache" / "features").iterdir())]
    cached.write_bytes(cached.read_bytes()[:5])
    assert fusion_train.collected(str(data), {"model": "auto"}, spec, said.append) == [{"qid": "q3"}]
    assert len(calls) == 3 and any("unreadable" in s and cached.name in s for s in said)


def test_the_previous_turn_table_pairs_each_pipeline_and_chooses_by_the_defaults_structure():
    """`--turn-alone`: each held-out pipeline on stores of each turn alone against the defaults' (with the turn
    before), and the choice the defaults' structure makes."""
    def rows(hits):
        return [{"qid": f"q{i}", "user_id": "u", "recall_at_10": h} for i, h in enumerate(hits)]

    pipes = ("lodo_parts_guarded", "lodo_guarded", "lodo_parts", "lodo_pooled")
    alone = {"a": {p: rows([1.0] * 10 + [0.0] * 10) for p in pipes}}
    better = {"a": {p: rows([1.0] * 18 + [0.0] * 2) for p in pipes}}
    lines = lodo.previous_turn_table(alone, better)
    assert any(line.startswith("  lodo_parts_guarded alone 0.500   with previous turn 0.900") for line in lines)
    assert lines[-1].endswith("with the previous turn")
    assert lodo.previous_turn_table(better, alone)[-1].endswith("each turn alone")


def test_the_feature_study_holds_a_feature_at_its_mean_and_counts_neighbours_first():
    """experiments/bench/fusion_features_dev.py: holding the one feature that marks the gold candidate at
    its mean takes away what it ranks by; a wrong first candidate next to the evidence is counted."""
    import importlib.util

    path = learned.ROOT / "experiments" / "bench" / "fusion_features_dev.py"
    spec = importlib.util.spec_from_file_location("fusion_features_dev", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    coef = np.zeros(N)
    coef[GOOD] = 1.0
    model = learned.FusionModel({"version": "t", "features": list(learned.FEATURES),
                                 "models": {"minilm": {"mean": [0.0] * N, "scale": [1.0] * N, "coef": coef.tolist()}}})
    rows = _rows("worksessions", "dev", 3, 1.0, 11)
    assert study._metrics(rows, model, [])[1] == 1.0  # `cos` marks the gold: first every time
    assert study._metrics(rows, model, ["cos"])[1] < 0.5  # held at its mean: the order is arbitrary
    r = dict(rows[0], ids=["u:s1#3", "u:s1#4", "u:s2#0"], X=np.zeros((3, N)), gold={"u:s1#4"})
    r["X"][:, GOOD] = [3.0, 1.0, 0.0]
    assert study._first_wrong([r], model) == (1, 1)


def test_the_length_study_sets_each_variant_from_the_messages_own_lengths():
    """experiments/bench/fusion_length_dev.py: each variant of the length column is computed from the
    messages' lengths (not from what the column held), and the held-out figures come out per dev dataset."""
    import importlib.util
    import math

    path = learned.ROOT / "experiments" / "bench" / "fusion_length_dev.py"
    spec = importlib.util.spec_from_file_location("fusion_length_dev", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    col = learned.FEATURES.index("chars_share")
    r = dict(_rows("worksessions", "dev", 1, 1.0, 3)[0])
    r["ids"], r["X"] = ["a", "b", "c", "d"], np.full((4, N), 9.0)
    msgs = {"a": ("u", "user", math.log1p(10)), "b": ("u", "assistant", math.log1p(900)),
            "c": ("u", "user", math.log1p(40)), "d": ("u", "assistant", math.log1p(1500))}
    means = study.store_means(msgs)
    got = {v: study.with_variant([r], v, msgs, means)[0]["X"][:, col] for v in study.VARIANTS}
    assert got["question_pct"].tolist() == [0.0, 0.5, 0.25, 0.75]
    assert got["absolute"].tolist() == pytest.approx([math.log1p(n) for n in (10, 900, 40, 1500)])
    assert got["role_candidates"][0] == pytest.approx(-got["role_candidates"][2])  # against the other user turn
    assert got["none"].tolist() == [0.0] * 4 and r["X"][0, col] == 9.0  # the rows themselves are not changed
    rows = _rows("locomo", "dev", 3, 1.0, 5) + _rows("worksessions", "dev", 3, 1.0, 6)
    held = lodo.dev_held_out(rows)  # what both dev studies (length, C rule) report
    assert set(held) == {"locomo (minilm)", "worksessions (minilm)"} and all(v[0] == 1.0 for v in held.values())
    assert lodo.dev_held_out(rows, rule="best").keys() == held.keys()


def test_the_two_vector_study_adds_the_alone_cosine_and_its_one_vector_column_is_the_shipped_structure(monkeypatch):
    """experiments/bench/two_vectors_dev.py: each candidate's cosine with its turn embedded alone (and its
    z-score) joins the feature row; over the built-in columns alone its fit scores exactly as the shipped
    structure (`lodo.fit_parts`), and the alone cosine ranks where it marks the evidence."""
    import importlib.util

    path = learned.ROOT / "experiments" / "bench" / "two_vectors_dev.py"
    spec = importlib.util.spec_from_file_location("two_vectors_dev", path)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    rows = _rows("locomo", "dev", 3, 1.0, 7) + _rows("worksessions", "dev", 3, 1.0, 8)
    shipped = lodo.dev_held_out_rows(rows)
    mine = lodo.dev_held_out_rows(rows, fit=lambda train, _e, rule: study.Wide(train, N, rule))
    assert {k: [m["mrr"] for m in v] for k, v in mine.items()} == {k: [m["mrr"] for m in v] for k, v in shipped.items()}

    class Unit:  # an encoder whose vectors say which candidate the question is about
        def encode_query(self, text):
            return np.array([1.0, 0.0])

    hidden = []
    for r in rows:  # `cos` no longer marks the gold; the alone vector does
        X = r["X"].copy()
        X[:, GOOD] = 0.0
        hidden.append({**r, "X": X})
    alone = {"offline:minilm": {f"{r['dataset']}/{i}": np.array([1.0, 0.0]) if i in r["gold"] else np.array([0.0, 1.0])
                                for r in hidden for i in r["ids"]}}
    monkeypatch.setattr(study, "Embedder", lambda model: Unit())
    wide = study.widened(hidden, alone)
    assert wide[0]["X"].shape == (12, N + 2) and sorted(wide[0]["X"][:, N]) == [0.0] * 11 + [1.0]
    one = lodo.dev_held_out_rows(wide, fit=lambda train, _e, rule: study.Wide(train, N, rule))
    two = lodo.dev_held_out_rows(wide, fit=lambda train, _e, rule: study.Wide(train, N + 2, rule))
    assert all(np.mean([m["mrr"] for m in two[k]]) == 1.0 > np.mean([m["mrr"] for m in one[k]]) for k in two)


def test_two_processes_collecting_the_same_features_both_get_them_and_leave_one_cache_file(tmp_path, monkeypatch):
    """`fusion_train.collected` from two processes at once (a `--train` beside a `--leave-one-dataset-out`):
    each gets the rows, the cache ends as one whole file that a third call reads, and no temporary file stays."""
    import os
    import subprocess
    import sys

    script = tmp_path / "collect.py"
    script.write_text(
        "import sys, time\n"
        "from dkilab.bench import fusion_train\n"
        "def slow(*a, **k):\n"
        "    time.sleep(1.0)\n"
        "    return [{'qid': 'q', 'n': list(range(50000))}]\n"
        "fusion_train.collect = slow\n"
        "rows = fusion_train.collected(None, {'model': 'auto'}, {'name': 'fixtures', 'split': 'test'}, print)\n"
        "print('rows', len(rows), len(rows[0]['n']))\n")
    env = {**os.environ, "DKILAB_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs) and all("rows 1 50000" in o for o in outs)
    files = list((tmp_path / "cache" / "features").iterdir())
    assert len(files) == 1 and files[0].suffix == ".pkl"
    from dkilab.bench import fusion_train

    monkeypatch.setenv("DKILAB_CACHE_DIR", str(tmp_path / "cache"))
    got = fusion_train.collected(None, {"model": "auto"}, {"name": "fixtures", "split": "test"},
                                 lambda line: pytest.fail(line))
    assert len(got[0]["n"]) == 50000
