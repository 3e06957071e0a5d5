"""`dkilab bench retrieval` on the bundled fixtures: the table (dataset split x method, interval, paired
difference against the previous defaults), the defaults-vs-previous lines, the category checks and, with peers,
engram-search and rank-bm25 in the same run on every retrieval metric."""
import re

import yaml

from dkilab.bench.retrieval import CONFIG, main


def test_the_table_has_every_method_with_intervals_and_paired_differences(tmp_path, capsys):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["datasets"] = [{"name": "fixtures", "split": "dev"}, {"name": "fixtures", "split": "test"}]
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(config=str(path), tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", peers=True) == 0
    out = capsys.readouterr().out
    head, *rest = out.split("\n\n")
    lines = head.splitlines()
    # the peers are not columns of the candidates' table: they have their own
    assert lines[1].split() == ["dataset", "previous_defaults", "defaults", "neighbors", "bm25_only", "dense_only"]
    for ds in ("fixtures:dev", "fixtures:test"):
        row = next(ln for ln in lines if ln.startswith(ds))
        assert len(re.findall(r"\d\.\d{3} ±\d\.\d{3}", row)) == 5  # every method, with its interval
        assert len(re.findall(r" [+-]\d\.\d{3}\*?", row)) >= 4  # paired against the previous defaults
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


def test_the_shipped_defaults_are_the_dev_winner_and_the_previous_ones_are_written_out():
    """RecallConfig() is the tuned pipeline of retrieval_tune_dev.yaml (its fixed block + the winning grid
    point), and both configs spell out the previous defaults the same way, as RecallConfig() once was."""
    from dkilab.recall.config import SignalsConfig

    root = CONFIG.parents[0]
    tune = yaml.safe_load((root / "retrieval_tune_dev.yaml").read_text())
    grid = next(s for s in tune["strategies"] if s.get("label") == "grid")["params"]["recall"]["signals"]
    winner = {"fusion": "weighted", "speaker_focus": 0.3, "lexical_query": "full"}
    shipped = SignalsConfig().model_dump()
    assert {k: shipped[k] for k in [*grid, *winner]} == grid | winner
    bench = yaml.safe_load(CONFIG.read_text())
    labels = {s.get("label"): s for s in bench["strategies"]}
    assert "params" not in labels["defaults"]  # the shipped defaults, nothing set
    previous = [next(s for s in c["strategies"] if s.get("label") == "previous_defaults")["params"]
                for c in (bench, tune)]
    assert previous[0] == previous[1]
    old = SignalsConfig(**previous[0]["recall"]["signals"])
    assert (old.vector_threshold, old.fusion, old.keyword_topk, old.vector_top_k) == (0.5, "rrf", 5, 10)
