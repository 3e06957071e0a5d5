"""n per metric on the comparison plot (issue 34): a hallucination rate over 12 questions rests on the
unanswerable ones only, and the plot says how many."""
import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
from dkilab.eval.scoring import aggregate, score_answer  # noqa: E402
from dkilab.eval.views.plots import headline_figure  # noqa: E402
from dkilab.eval.views.tables import metric_counts  # noqa: E402
from dkilab.types import Answer, QAItem  # noqa: E402


def rows():
    ans = [score_answer(QAItem(f"q{i}", "Paris", 1, ["m1"], True), Answer("Paris.")) | {"category": 1}
           for i in range(8)]
    un = [score_answer(QAItem(f"u{i}", None, 5, [], False), Answer("It was Rome.")) | {"category": 5}
          for i in range(4)]
    return ans + un + [{"error": "Traceback ...", "category": 1, "answerable": True}]


def test_each_metric_counts_the_questions_it_applies_to():
    counts = metric_counts({"a@x": rows()})
    assert counts["score"]["a@x"] == 12 and counts["hallucination_rate"]["a@x"] == 4
    assert counts["answer_score"]["a@x"] == 8


def test_the_headline_plot_prints_n_per_metric_beside_each_value():
    table = pd.DataFrame([aggregate(rows())], index=["a@x"])
    table["questions"] = 13
    fig = headline_figure(table, "t", metric_counts({"a@x": rows()}))
    texts = {ax.get_xlabel(): [t.get_text() for t in ax.texts] for ax in fig.axes if ax.get_visible()}
    halluc = next(v for k, v in texts.items() if k.startswith("hallucination"))
    score = next(v for k, v in texts.items() if k.startswith("answer score"))
    assert halluc == ["1.000  n=4"] and score[0].endswith("n=12")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["a@x"]  # no cell-wide "(n=13)" that the hallucination bar would seem to rest on


def test_categories_too_small_to_read_are_left_out_and_the_figure_says_so():
    """Issue 34 item 14: 26 MemDaily categories of 1-2 questions each are unreadable bars. Categories
    under `min_n` questions in every cell are dropped, with a line saying how many and how many questions;
    when every category is small, all stay."""
    from dkilab.eval.views.plots import category_figure

    def agg(n, v=0.5):
        return {"score": v, "score_ci95_low": v - 0.1, "score_ci95_high": v + 0.1, "questions": n}

    by_cell = {"a@x": {"big": agg(40), "mid": agg(6), **{f"tiny{i}": agg(2) for i in range(3)}},
               "b@x": {"big": agg(40), "mid": agg(6), **{f"tiny{i}": agg(1) for i in range(3)}}}
    fig = category_figure(by_cell, "score")
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert [t.split()[0] for t in ticks] == ["big", "mid"]
    notes = [t.get_text() for t in fig.texts]
    assert notes == ["not shown: 3 categories with fewer than 5 questions (6 questions in all)"]
    only_small = {c: {k: v for k, v in cats.items() if k.startswith("tiny")} for c, cats in by_cell.items()}
    fig = category_figure(only_small, "score")
    assert len(fig.axes[0].get_xticklabels()) == 3 and not fig.texts
