"""`dkilab bench retrieval` on the bundled fixtures: the table (dataset split x method, interval, paired
difference against the previous defaults), the defaults-vs-previous lines, the category checks and, with peers,
engram-search and rank-bm25 in the same run on every retrieval metric."""
import re

import pytest
import yaml
from dkilab.bench.retrieval import CONFIG, main


@pytest.mark.slow  # every method of the bench over its fixtures, with intervals (about 40 s here)
def test_the_table_has_every_method_with_intervals_and_paired_differences(tmp_path, capsys):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["datasets"] = [{"name": "fixtures", "split": "dev"}, {"name": "fixtures", "split": "test"}]
    for s in cfg["strategies"]:
        s.pop("datasets", None)  # the e5 rows skip the long work sessions: here every row runs on the fixtures
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(config=str(path), tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", peers=True) == 0
    out = capsys.readouterr().out
    head, *rest = out.split("\n\n")
    lines = head.splitlines()
    # the peers are not columns of the candidates' table: they have their own
    assert lines[1].split() == ["dataset", "previous_defaults", "defaults", "stock_minilm", "weighted",
                                "reference_front", "no_cue_parts", "unguarded", "turn_alone", "e5", "e5_english_part",
                                "bm25_only", "dense_only"]
    for ds in ("fixtures:dev", "fixtures:test"):
        row = next(ln for ln in lines if ln.startswith(ds))
        assert len(re.findall(r"\d\.\d{3} ±\d\.\d{3}", row)) == 12  # every method, with its interval
        assert len(re.findall(r" [+-]\d\.\d{3}\*?", row)) >= 11  # paired against the previous defaults
    assert re.search(r"fixtures:dev\s+n=\s*\d+\s+[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", out)
    assert "categories where defaults is below the best single signal" in out
    assert "categories where defaults is below previous_defaults" in out
    peers = out[out.index("peers in the same run"):].splitlines()
    assert peers[1].split() == ["dataset", "metric", "previous_defaults", "defaults", "engram_search", "rank_bm25",
                                "/engram_search", "/rank_bm25"]
    for ds in ("fixtures:dev", "fixtures:test"):
        rows = {ln.split()[1]: ln for ln in peers if ln.startswith(ds)}
        assert set(rows) == {"recall_at_10", "any_hit_at_10", "session_any_hit_at_5", "ndcg_at_10", "mrr"}
        for row in rows.values():  # four values with intervals, then the two ratios
            assert len(re.findall(r"\d\.\d{3} ±\d\.\d{2}", row)) == 4
            _, *ratios = row.rsplit("±", 1)[1].split()  # the last interval, then defaults / each peer
            assert len(ratios) == 2 and all(re.fullmatch(r"\d+\.\d{2}\*?", r) for r in ratios)


def test_the_shipped_defaults_are_learned_fusion_over_the_dev_winner_and_each_row_changes_one_thing():
    """RecallConfig() is learned fusion over the hand-weighted dev winner of retrieval_tune_dev.yaml (its fixed
    block + the winning grid point, which the learned model reads as one feature); the bench's rows each
    change one thing of it, and the previous defaults are what shipped before (the dev winner, weighted, on
    stores that embed each turn with its predecessor); the tuning grid still spells out the seed's values."""
    from dkilab.eval.data import dataset_info
    from dkilab.recall.config import SignalsConfig

    root = CONFIG.parents[0]
    tune = yaml.safe_load((root / "retrieval_tune_dev.yaml").read_text())
    grid = next(s for s in tune["strategies"] if s.get("label") == "grid")["params"]["recall"]["signals"]
    shipped = SignalsConfig().model_dump()
    assert {k: shipped[k] for k in grid} == grid
    assert (shipped["speaker_focus"], shipped["lexical_query"], shipped["fusion"], shipped["fusion_model"]) == (
        0.3, "full", "learned", None)
    bench = yaml.safe_load(CONFIG.read_text())
    # held-back data only: the dev halves fit the fusion model (dkilab/bench/fusion_train.py's DEV)
    from dkilab.bench.fusion_train import DEV

    assert all(d.get("split") == "test" for d in bench["datasets"])
    # and LoCoMo by session, whose dev half is LoCoMo's (fitted at message granularity)
    assert {d["name"] for d in bench["datasets"]} == {d["name"] for d in DEV} | {"locomo_sessions"}
    assert all(d["split"] == "dev" for d in DEV)
    rows = {s.get("label"): s for s in bench["strategies"]}
    assert set(rows["defaults"]) == {"name", "label"}  # the shipped defaults, nothing set
    assert rows["weighted"]["params"] == {"recall": {"signals": {"fusion": "weighted"}}}
    assert "embedder" not in rows["weighted"]
    assert rows["no_cue_parts"]["params"] == {"recall": {"signals": {
        "fusion_model": "experiments/models/fusion_lr_no_cue_parts.json"}}} and "embedder" not in rows["no_cue_parts"]
    # stock MiniLM for English (the defaults before the fine-tuned encoder), with the fusion model fitted on its
    # stores; turn_alone changes one thing of it, on the English data only (e5 stores keep the turn before)
    assert rows["stock_minilm"] == {"name": "recall_only", "label": "stock_minilm",
                                    "embedder": {"english": "offline:minilm"}}
    assert rows["turn_alone"]["embedder"] == {"with_previous_turn": False, "english": "offline:minilm"}
    assert set(rows["turn_alone"]["params"]["recall"]["signals"]) == {"fusion_model"}  # fitted on such stores
    assert {dataset_info(d)["language"] for d in rows["turn_alone"]["datasets"]} == {"en"}
    # the encoder only (and not on the long work sessions, which e5 embeds at ~2 messages/s)
    assert rows["e5"] == {"name": "recall_only", "label": "e5", "embedder": {"model": "offline:e5"},
                          "datasets": ["locomo", "memdaily", "madial_bench_zh", "madial_bench_en"]}
    assert rows["e5_english_part"]["embedder"] == rows["e5"]["embedder"]  # e5 with one thing changed: the model
    assert rows["e5_english_part"]["params"] == {"recall": {"signals": {
        "fusion_model": "experiments/models/fusion_lr_e5_english.json"}}}
    # the shipped model: the fine-tuned encoder's question part is the one its study fitted out of fold, for
    # this adapter; stock MiniLM keeps parts of its own (for `Embedder()`'s stores and the stock_minilm row)
    import json

    from dkilab.encoders.embedder import LOCOMO_EMBEDDER, weights_digest
    from dkilab.recall.learned import DEFAULT_MODEL

    study, shipped_model = (json.loads(p.read_text()) for p in (root / "models" / "fusion_lr_minilm_locomo.json",
                                                                 DEFAULT_MODEL))
    parts = shipped_model["models"]
    assert set(parts) == {"minilm", "minilm:utterance", "minilm-locomo", "minilm-locomo:utterance", "e5",
                          "e5:utterance"}
    assert parts["minilm-locomo"] == study["models"]["minilm-locomo"]
    assert "locomo out of fold, on offline:minilm-locomo stores" in parts["minilm-locomo"]["trained_on"]
    # the work sessions: in sample, never trained on
    assert parts["minilm-locomo"]["datasets"] == ["locomo", "worksessions"]
    assert parts["minilm-locomo"]["adapter"] == weights_digest(LOCOMO_EMBEDDER)  # this adapter's
    assert parts["minilm"]["trained_on"].startswith("locomo, worksessions (")
    assert parts["minilm"] != parts["minilm-locomo"]
    assert rows["previous_defaults"]["params"] == rows["weighted"]["params"]
    assert rows["previous_defaults"]["embedder"] == {"with_previous_turn": True, "english": "offline:minilm"}
    seed = next(s for s in tune["strategies"] if s.get("label") == "previous_defaults")["params"]["recall"]["signals"]
    old = SignalsConfig(**seed)
    assert (old.vector_threshold, old.fusion, old.keyword_topk, old.vector_top_k) == (0.5, "rrf", 5, 10)


@pytest.mark.parametrize("argv, named", [(["--no-cue-parts"], "--no-cue-parts"), (["--no-guard"], "--no-guard"),
                                         (["--turn-alone"], "--turn-alone"),
                                         (["--out", "m.json", "--english-e5-part"], "--out, --english-e5-part"),
                                         (["--train", "--peers"], "--peers"),
                                         (["--leave-one-dataset-out", "--peers"], "--leave-one-dataset-out")])
def test_flags_that_belong_to_training_alone_are_refused_without_it_and_nothing_runs(argv, named, tmp_path, capsys):
    """A model-fitting flag without --train (or --train with --peers) is an error that names the flag; neither
    the bench nor the trainer starts, and no model file is written."""
    from dkilab import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "retrieval", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", *argv])
    assert named in str(exc.value) and "--train" in str(exc.value)
    assert not (tmp_path / "m.db").exists() and not list(tmp_path.iterdir())


def test_fusion_training_is_a_declared_dev_study_so_its_config_is_not_refused():
    """`--train` (and `--leave-one-dataset-out`) recall LoCoMo dev on the encoder fine-tuned on it: the
    config says `purpose: tune`, so the fitted-split check lets its dev cells through (it refused them)."""
    from dkilab.bench import fusion_train
    from dkilab.encoders.embedder import LOCOMO_EMBEDDER

    cells = fusion_train._cells()
    assert any(c.dataset.name == "locomo" and c.dataset.split == "dev" and c.embedder.model == LOCOMO_EMBEDDER
               for c in cells)
