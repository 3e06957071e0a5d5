"""`dkilab bench retrieval` on the bundled fixtures: the table (dataset split x method, interval, paired
difference against the defaults), the tuned-vs-defaults lines and the category check."""
import re

import yaml

from dkilab.bench.retrieval import CONFIG, main


def test_the_table_has_every_method_with_intervals_and_paired_differences(tmp_path, capsys):
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["datasets"] = [{"name": "fixtures", "split": "dev"}, {"name": "fixtures", "split": "test"}]
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(config=str(path), tracking_uri=f"sqlite:///{tmp_path / 'm.db'}") == 0
    out = capsys.readouterr().out
    head, *rest = out.split("\n\n")
    lines = head.splitlines()
    assert lines[1].split() == ["dataset", "defaults", "tuned", "tuned_neighbors", "bm25_only", "dense_only"]
    for ds in ("fixtures:dev", "fixtures:test"):
        row = next(ln for ln in lines if ln.startswith(ds))
        assert len(re.findall(r"\d\.\d{3} ±\d\.\d{3}", row)) == 5  # every method, with its interval
        assert len(re.findall(r" [+-]\d\.\d{3}\*?", row)) >= 4  # paired against the defaults
    assert re.search(r"fixtures:dev\s+n=\s*\d+\s+[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", out)
    assert "categories where tuned is below the best single signal" in out
