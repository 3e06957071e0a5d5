"""Chinese renders in every plot (issue 34): `make setup` installs Noto CJK, the plots select it, and
drawing Chinese labels raises no missing-glyph warning (which is what a box in place of a character is)."""
import warnings

import matplotlib

matplotlib.use("Agg")


def _draw(fig) -> list[str]:
    import io

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_a_tree_with_chinese_labels_draws_every_glyph():
    from dkilab.notebook import plot_tree

    fig = plot_tree([("root", None, "总控：客户经理助理"), ("a", "root", "押品评估代理"), ("b", "a", "估值查询")],
                    highlight="b", notes={"b": "指代：张三的押品"}, title="语义指针")
    assert _draw(fig) == []


def test_the_category_plot_draws_chinese_category_names():
    from dkilab.eval.views.plots import _cjk_font
    from matplotlib import rcParams

    _cjk_font()
    assert "CJK" in rcParams["font.sans-serif"][0] or "WenQuanYi" in rcParams["font.sans-serif"][0], (
        "no CJK font: make setup installs Debian's fonts-noto-cjk")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar(["单跳", "多跳", "时间推理"], [0.5, 0.3, 0.2])
    ax.set_title("按类别的得分")
    try:
        assert _draw(fig) == []
    finally:
        plt.close(fig)
