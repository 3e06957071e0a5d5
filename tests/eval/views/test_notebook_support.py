"""dkilab.notebook: an experiment's cells and predictions as DataFrames read back from a real tracking
store, the shared plots, and the HTML views of a suffix and a fact-call loop."""
from datetime import datetime, timezone

import pytest
from dkilab.notebook import (
    load_predictions,
    load_runs,
    plot_categories,
    plot_headlines,
    render_fact_calls,
    render_suffix,
)


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


def test_pareto_front_keeps_only_undominated_cells():
    import pandas as pd
    from dkilab.notebook import pareto_front

    runs = pd.DataFrame({"prompt_tokens": [100, 200, 300, 150, 300], "score": [0.1, 0.5, 0.5, 0.05, 0.6]},
                        index=["cheap", "mid", "mid_but_dearer", "dominated", "best"])
    assert pareto_front(runs) == ["cheap", "mid", "best"]


def test_sweep_heatmap_and_frontier_show_the_grid_with_labels():
    import pandas as pd
    from dkilab.notebook import plot_frontier, plot_sweep

    runs = pd.DataFrame({"param.t": [15, 15, 300, 300], "param.b": [96, 512, 96, 512], "score": [0.1, 0.2, 0.3, 0.4],
                         "prompt_tokens": [100, 500, 120, 520]}, index=list("abcd"))
    fig = plot_sweep(runs, "param.t", "param.b", ["score", "prompt_tokens", "not_logged"],
                     {"param.t": "threshold (tokens)"})
    heat = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heat] == ["answer score (0-1)", "prompt tokens (mean)"]  # unknown metric: no panel
    assert heat[0].get_xlabel() == "threshold (tokens)" and heat[0].get_ylabel() == "param.b"
    assert sorted(t.get_text() for t in heat[0].texts) == ["0.100", "0.200", "0.300", "0.400"]
    assert [t.get_text() for t in heat[0].get_yticklabels()] == ["512", "96"]  # the larger budget on top
    fig = plot_frontier(runs, names={"a": "t15 b96"})
    ax = fig.axes[0]
    assert ax.get_xlabel() == "prompt tokens (mean)" and "t15 b96" in [t.get_text() for t in ax.texts]


def test_retrieval_misses_take_misses_only_round_robin_over_cells():
    import pandas as pd
    from dkilab.notebook import retrieval_misses
    from dkilab.types import Conversation, Message

    msgs = [Message(f"m{i}", "u", "s", i, "user", f"text {i}", datetime(2026, 1, 1, tzinfo=timezone.utc))
            for i in range(6)]
    preds = pd.DataFrame([
        {"cell": "fused@a", "question": "q1", "evidence_ids": ["m1"], "recalled_ids": ["m1", "m2"]},  # a hit
        {"cell": "fused@a", "question": "q2", "evidence_ids": ["m3"], "recalled_ids": ["m2", "m4"]},
        {"cell": "fused@a", "question": "q3", "evidence_ids": ["m5"], "recalled_ids": ["m0"]},
        {"cell": "fused@b", "question": "q4", "evidence_ids": ["m0", "m4"], "recalled_ids": ["m4"]},
        {"cell": "fused@b", "question": "q5", "evidence_ids": [], "recalled_ids": ["m4"]},  # no evidence: skipped
    ])
    out = retrieval_misses(preds, [Conversation("c", "u", msgs, [])], k=10, n=2)
    assert list(out["question"]) == ["q2", "q4"]  # one per cell before a second of either
    assert "m3: text 3" in out.iloc[0]["gold evidence"] and "✓ m4: text 4" in out.iloc[1]["top hits (of 10)"]


def test_available_datasets_names_what_is_skipped(tmp_path, capsys):
    from dkilab.notebook import available_datasets

    assert available_datasets(["fixtures", "locomo"], str(tmp_path)) == ["fixtures"]
    out = capsys.readouterr().out
    assert "skipped locomo" in out and str(tmp_path) in out and "fixtures" not in out


def test_tree_plot_marks_the_asking_agents_path():
    from dkilab.notebook import plot_tree

    fig = plot_tree([("root", None, "调度"), ("a", "root", "退款"), ("b", "root", "巡检"), ("c", "a", "查询")],
                    highlight="c", notes={"c": "client_id -> C-1029"})
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "c: 查询" in texts and "client_id -> C-1029" in texts
    bold = sorted(round(line.get_linewidth(), 1) for line in ax.get_lines())
    assert bold == [1.0, 2.5, 2.5]  # root-a and a-c on the path; root-b not


def test_category_names_replace_numbers_where_the_dataset_has_them():
    from dkilab.eval.scoring.bootstrap import aggregate_by_category

    rows = [{"category": 2, "category_name": "temporal", "score": 1.0}, {"category": 7, "score": 0.0}]
    assert set(aggregate_by_category(rows, names=["score"])) == {"temporal", "7"}
