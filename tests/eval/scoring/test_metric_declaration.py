"""Issue 31 item 2: a metric is declared once. Declaring one in a single place is enough for it to be
computed per question, aggregated with an interval, shown in the report's default columns, plotted in
the comparison figure and compared in the paired table; and the view fields (label, plot, narrow,
paired) are not part of a metric's identity, so declaring them re-runs nothing."""
import dataclasses

import pytest
import yaml
from dkilab.cli import main as cli
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import Metric, metric, metrics_version


@pytest.fixture
def recalled_count():
    """A new metric, declared in one place (as a module of dkilab/eval/scoring/ would)."""
    metric("recalled_count", kind="any", rank=44, plot=12, label="messages recalled (count)", narrow=("answers",),
           paired=True, description="how many message ids the strategy recalled")(
        lambda q: float(len(q.answer.recalled_ids)))
    yield "recalled_count"
    METRICS.remove("recalled_count")


def test_a_metric_declared_once_reaches_the_report_the_plot_and_the_paired_table(tmp_path, recalled_count, capsys):
    from dkilab.eval.harness.experiment import load_experiment
    from dkilab.eval.harness.runner import run_experiment
    from dkilab.eval.views.plots import headline_figure
    from dkilab.eval.views.tables import results_table

    cfg = {"name": "declared-once", "tracing": False, "datasets": [{"name": "fixtures", "limit": 1,
                                                                    "question_limit": 4}],
           "defaults": {"max_results": 5},
           "strategies": [{"name": "recall_only", "label": "fused"},
                          {"name": "recall_only", "label": "bm25",
                           "params": {"recall": {"signals": {"vector_enabled": False, "reference_enabled": False}}}}]}
    path = tmp_path / "declared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    results = run_experiment(load_experiment(path), uri=uri, progress=False, echo=lambda *a: None)
    assert all(r.metrics.get("recalled_count", 0) > 0 for r in results)
    assert "recalled_count_ci95_low" in results[0].metrics  # an interval, like every declared mean

    table = results_table(results, intervals=True)
    fig = headline_figure(table)
    assert "messages recalled (count) · 95% CI" in [ax.get_xlabel() for ax in fig.axes]

    capsys.readouterr()
    assert cli(["report", "declared-once", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "recall_at_10" in line)
    assert "recalled_count" in head  # a default column, without --metrics
    paired = out[out.index("paired"):]
    assert "recalled_count" in paired  # and in the paired differences


def test_view_fields_are_not_part_of_a_metrics_identity():
    before = metrics_version()
    decl = METRICS["prompt_tokens"]
    views = {f.name for f in dataclasses.fields(Metric)} & {"label", "rate", "plot", "narrow", "paired"}
    assert views == {"label", "rate", "plot", "narrow", "paired"}
    try:
        METRICS.remove("prompt_tokens")
        METRICS.add("prompt_tokens", dataclasses.replace(decl, label="x", rate=True, plot=None, narrow=(), paired=True))
        assert metrics_version() == before
        METRICS.remove("prompt_tokens")
        METRICS.add("prompt_tokens", dataclasses.replace(decl, version="2"))
        assert metrics_version() != before  # the identity still moves when the metric itself changes
    finally:
        METRICS.remove("prompt_tokens")
        METRICS.add("prompt_tokens", decl)
