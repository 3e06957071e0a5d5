"""`dkilab bench retrieval` on the bundled fixtures: the table (dataset split x method, interval, paired
difference against the defaults), the tuned-vs-defaults lines, the category checks and, with peers,
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
    assert lines[1].split() == ["dataset", "defaults", "tuned", "tuned_neighbors", "bm25_only", "dense_only"]
    for ds in ("fixtures:dev", "fixtures:test"):
        row = next(ln for ln in lines if ln.startswith(ds))
        assert len(re.findall(r"\d\.\d{3} ±\d\.\d{3}", row)) == 5  # every method, with its interval
        assert len(re.findall(r" [+-]\d\.\d{3}\*?", row)) >= 4  # paired against the defaults
    assert re.search(r"fixtures:dev\s+n=\s*\d+\s+[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", out)
    assert "categories where tuned is below the best single signal" in out
    assert "categories where tuned is below defaults" in out
    peers = out[out.index("peers in the same run"):].splitlines()
    assert peers[1].split() == ["dataset", "metric", "defaults", "tuned", "engram_search", "rank_bm25",
                                "/engram_search", "/rank_bm25"]
    for ds in ("fixtures:dev", "fixtures:test"):
        rows = {ln.split()[1]: ln for ln in peers if ln.startswith(ds)}
        assert set(rows) == {"recall_at_10", "any_hit_at_10", "session_any_hit_at_5", "ndcg_at_10", "mrr"}
        for row in rows.values():  # four values with intervals, then the two ratios
            assert len(re.findall(r"\d\.\d{3} ±\d\.\d{2}", row)) == 4
            _, *ratios = row.rsplit("±", 1)[1].split()  # the last interval, then tuned / each peer
            assert len(ratios) == 2 and all(re.fullmatch(r"\d+\.\d{2}\*?", r) for r in ratios)
