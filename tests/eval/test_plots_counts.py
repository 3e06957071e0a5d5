"""n per metric on the comparison plot (issue 34): a hallucination rate over 12 questions rests on the
unanswerable ones only, and the plot says how many."""
import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from dkilab.eval.metrics import aggregate, score_answer  # noqa: E402
from dkilab.eval.plots import headline_figure  # noqa: E402
from dkilab.eval.tables import metric_counts  # noqa: E402
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
