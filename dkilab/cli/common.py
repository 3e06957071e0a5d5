"""What the command modules share."""
from __future__ import annotations

import argparse
from typing import Callable


def _at_least(cast: Callable[[str], float], low: float, kind: str) -> Callable[[str], float]:
    """An argparse type: `cast(text)`, refused below `low` (NaN too) with one line naming the value."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be {'at least 1' if low == 1 else '0 or more'}, got {text}")
        return value
    return parse


positive_int = _at_least(int, 1, "a whole number")
non_negative_int = _at_least(int, 0, "a whole number")
non_negative_float = _at_least(float, 0, "a number")
