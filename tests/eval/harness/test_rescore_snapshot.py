"""No figure moves when scoring is restructured (issue 88 item 5): the stored answers of every cell of eight CI
configs (judge protocols and probes, the oracle, the fact-call personas, scripted fact calls, the LLM pointer
policy, the session flow, the recall agent, context-only cells), kept in tests/data/rescore_snapshot/ with the
metrics the code of 2026-12-03 gave them, are re-scored by today's scorers to the same value of every metric.
A change meant to move a figure rewrites the snapshot: `python -m tests.eval.harness.test_rescore_snapshot`."""
import gzip
import json
import math
import sys

import pytest

from dkilab.eval.harness.cell import load_cell_questions
from dkilab.eval.harness.experiment import check_config, load_experiment
from dkilab.eval.harness.prepare import cell_scorers
from dkilab.eval.harness.rescore import changed_metrics, parse_answers, rescore_cell
from dkilab.eval.tracking.runs import cell_metrics

from tests.conftest import ROOT

SNAPSHOT = ROOT / "tests" / "data" / "rescore_snapshot"


def _cells():
    return json.loads((SNAPSHOT / "cells.json").read_text(encoding="utf-8"))


def rescored(cell, answers_file: str) -> dict[str, float]:
    items = load_cell_questions(cell, None)
    stored = parse_answers(gzip.decompress((SNAPSHOT / answers_file).read_bytes()).decode("utf-8"), items,
                           answers_file)
    header = stored[2]
    rows = rescore_cell(stored, items, cell_scorers(cell))
    return cell_metrics(rows, float(header["wall_s"]), dict(header.get("counters") or {}))


@pytest.mark.parametrize("config", sorted(_cells()))
def test_every_stored_cell_scores_to_the_metrics_it_had(config):
    want = _cells()[config]
    cells = check_config(load_experiment(ROOT / config), config)
    assert sorted(c.label for c in cells) == sorted(want)  # the config still has exactly these cells
    for cell in cells:
        got = {k: v for k, v in rescored(cell, want[cell.label]["answers"]).items()
               if not k.endswith(("_ci95_low", "_ci95_high"))}
        before = want[cell.label]["metrics"]
        changed, new, gone = changed_metrics(before, got)
        assert (changed, new, gone) == ([], [], []), (cell.label, {k: (before[k], got[k]) for k in changed})
        assert all(isinstance(v, float) and (math.isfinite(v) or v != v) for v in got.values())


if __name__ == "__main__":  # rewrite the metrics from today's code (the answers stay as they were stored)
    index = _cells()
    for config, cells in index.items():
        for cell in check_config(load_experiment(ROOT / config), config):
            cells[cell.label]["metrics"] = {k: v for k, v in rescored(cell, cells[cell.label]["answers"]).items()
                                            if not k.endswith(("_ci95_low", "_ci95_high"))}
    (SNAPSHOT / "cells.json").write_text(json.dumps(index, sort_keys=True, separators=(",", ":")), encoding="utf-8")
    sys.exit(0)
