"""dkilab.notebook: an experiment's cells and predictions as DataFrames read back from a real tracking
store, the shared plots, and the HTML views of a suffix and a fact-call loop."""
import pytest

from dkilab.notebook import load_predictions, load_runs, plot_categories, plot_headlines, render_fact_calls, render_suffix


def test_load_runs_gives_cells_in_config_order_with_intervals_and_params(scripted_run):
    cfg, results, uri = scripted_run
    runs = load_runs(cfg.name, uri)
    assert list(runs.index) == [r.cell.label for r in results]
    for res in results:
        row = runs.loc[res.cell.label]
        assert row["score"] == pytest.approx(res.metrics["score"]) and row["run_id"] == res.run_id
        assert row["score_low"] <= row["score"] <= row["score_high"]
        assert row["strategy"] == "recall_v4" and row["dataset"] == "scripted"
    assert runs.loc["native@scripted", "param.recall.fact_call.protocol"] == "native"
    assert runs.loc["recall_v4@scripted", "param.max_new_tokens"] == results[0].cell.instance.params.max_new_tokens
    assert not [c for c in runs.columns if "ci95" in c]


def test_load_predictions_and_the_plots(scripted_run):
    cfg, results, uri = scripted_run
    preds = load_predictions(cfg.name, uri)
    assert len(preds) == sum(len(r.rows) for r in results)
    assert list(preds["cell"].unique()) == [r.cell.label for r in results]
    assert {"question", "gold", "prediction", "score", "fact_call_log"} <= set(preds.columns)
    fig = plot_headlines(load_runs(cfg.name, uri))
    titles = [ax.get_xlabel() for ax in fig.axes if ax.get_visible()]
    assert any(t.startswith("answer score") for t in titles) and any(t.startswith("prompt tokens") for t in titles)
    assert not any(t.startswith("injected") for t in titles)  # no K/V anywhere: no empty panel
    fig = plot_categories(preds)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels and all("(n=" in t for t in labels)


def test_unknown_experiment_and_missing_store_are_clear(scripted_run, tmp_path):
    cfg, _, uri = scripted_run
    with pytest.raises(KeyError, match="no MLflow experiment named 'nope'.*" + cfg.name):
        load_runs("nope", uri)
    with pytest.raises(ValueError, match="no MLflow store"):
        load_runs(cfg.name, f"sqlite:///{tmp_path / 'missing.db'}")


def test_html_views_escape_and_box_the_summaries():
    text = ('[SUMMARY trace_id="u1:3" conf=high role=用户]\n- 押品 <b>入库</b>\n[/SUMMARY]\n'
            "[2024-01-01 10:00] 用户: plain line")
    out = render_suffix(text, {"history": 120, "window": 2048})
    assert "<code>u1:3</code>" in out and "&lt;b&gt;入库&lt;/b&gt;" in out and "plain line" in out
    assert "history 120" in out
    calls = [{"round": 1, "trace_id": "u1:3", "offset": 0, "limit": 1, "valid": True, "found": True, "tokens": 40},
             {"round": 2, "trace_id": "zz", "offset": 0, "limit": 1, "valid": False, "found": False, "tokens": 0}]
    table = render_fact_calls(calls, ["[FACT_SEGMENT trace_id=\"u1:3\"] <x>", ""])
    assert table.count("<tr>") == 3 and "&lt;x&gt;" in table and "<td>False</td>" in table
    assert render_fact_calls([]) == "<p>no fact calls</p>"
