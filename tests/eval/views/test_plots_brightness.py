"""Issue 34 item 7: notebook 03 tells the reader which cells of the sweep heatmaps are best; the sentence
must match the colour scale (the best cell is the brightest, for higher- and lower-is-better metrics)."""
import json

import numpy as np
import pandas as pd
from dkilab.eval.views.plots import sweep_heatmaps

from tests.conftest import ROOT


def _luminance(rgba) -> float:
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_best_cell_is_the_brightest_and_notebook_03_says_so():
    table = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1, 1, 2, 2], "score": [0.1, 0.2, 0.3, 0.9],
                          "hallucination_rate": [0.9, 0.3, 0.2, 0.1]})
    fig = sweep_heatmaps(table, "x", "y", ["score", "hallucination_rate"])
    for ax, best_is_high in zip([a for a in fig.axes if a.images], (True, False)):
        im = ax.images[0]
        values = np.asarray(im.get_array(), dtype=float)
        best = np.unravel_index(np.argmax(values) if best_is_high else np.argmin(values), values.shape)
        worst = np.unravel_index(np.argmin(values) if best_is_high else np.argmax(values), values.shape)
        assert _luminance(im.to_rgba(values[best])) > _luminance(im.to_rgba(values[worst]))
    cells = json.loads((ROOT / "notebooks" / "03_sweep_threshold_budget.ipynb").read_text())["cells"]
    text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "Brighter (yellow) is better in every panel" in text and "Darker is better" not in text
