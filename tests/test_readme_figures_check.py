# ruff: noqa: E501  (the blocks are the README's lines as printed)
"""How the README's figure check compares a block with what its command prints now (scripts/readme_figures.py):
every figure exactly, but the means of the token columns, which may move by half a percent between machines."""
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
try:
    import readme_figures
finally:
    sys.path.pop(0)

# the quickstart's block as an Intel Xeon printed it, and as an AMD EPYC printed it from the same code
XEON = """\
                                        score    hallucination_rate evidence_in_context evidence_visible    prompt_tokens  injected_tokens
cell
no_memory@fixtures       0.042 [0.000, 0.125]  0.875 [0.625, 1.000]        0.000 ±0.000     0.000 ±0.000   85.036 ±10.075     0.000 ±0.000
recall_v4@fixtures               0.029 ±0.032          1.000 ±0.000        1.000 ±0.000     0.650 ±0.200  807.000 ±27.020    59.250 ±8.377
full_attention@fixtures          0.011 ±0.014          1.000 ±0.000        0.800 ±0.175     0.800 ±0.175   85.036 ±10.075  579.071 ±51.925"""
EPYC = XEON.replace("807.000 ±27.020", "804.893 ±26.108").replace("579.071 ±51.925", "577.964 ±51.867")


def test_the_same_block_and_the_other_machines_token_means_are_current():
    assert readme_figures.same_table(XEON, XEON)
    assert readme_figures.same_table(XEON, EPYC) and readme_figures.same_table(EPYC, XEON)


@pytest.mark.parametrize("old, new", [
    ("807.000 ±27.020", "811.100 ±27.020"),  # a prompt 4 tokens longer on average (0.5%)
    ("579.071 ±51.925", "590.000 ±51.925"),
    ("0.029 ±0.032", "0.030 ±0.032"),  # a score, a rate, an evidence figure: exact
    ("0.650 ±0.200", "0.650 ±0.201"),
    ("0.875 [0.625, 1.000]", "0.875 [0.625, 0.999]"),
    ("85.036 ±10.075     0.000 ±0.000\nrecall", "85.036 ±10.075     0.001 ±0.000\nrecall"),
    ("recall_v4@fixtures      ", "recall_v5@fixtures      "),  # another cell
])
def test_any_other_change_is_stale(old, new):
    assert old in XEON
    assert not readme_figures.same_table(XEON, XEON.replace(old, new))


def test_a_row_or_column_more_or_less_is_stale():
    lines = XEON.splitlines()
    assert not readme_figures.same_table(XEON, "\n".join(lines[:-1]))
    assert not readme_figures.same_table(XEON, XEON.replace("injected_tokens", "injected_tokenz"))
    # a token column that does not parse as a number is compared as text
    assert not readme_figures.same_table(XEON, XEON.replace("807.000 ±27.020", "    nan ±27.020"))
