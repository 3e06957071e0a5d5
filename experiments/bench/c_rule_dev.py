"""How each fusion part's C is chosen (issue 59), on dev rows only.

Cross-validation picks each part's C from `fusion_train.CS`. Two rules:

- `best`: the C with the highest cross-validated objective;
- `one_se`: the smallest C (the strongest regularisation) whose objective is within one standard error of
  the best's, the error taken over the best C's folds (`fusion_train.one_standard_error`).

For each dev source in turn, this fits the shipped structure (`lodo.fit_parts`) on the *other* sources' dev
rows under each rule and scores the held-out source's dev rows: which rule transfers to data of a kind it
was not fitted on. Test splits are never scored. It prints the C each rule chose for every part.

    python experiments/bench/c_rule_dev.py [--data-dir DIR]

A dev study (`purpose: tune` data only); what it prints is what docs/retrieval.md quotes.
"""
from __future__ import annotations

import argparse

from dkilab.bench import lodo
from dkilab.bench.fusion_train import C_RULES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    dev, _ = lodo.collect_all(args.data_dir, echo=lambda _: None)
    print("dev rows only; each dev source scored by the structure fitted on the other sources' dev rows")
    table = {rule: lodo.dev_held_out(dev, print, rule) for rule in C_RULES}
    print()
    for line in lodo.dev_lines(table):
        print(line)


if __name__ == "__main__":
    main()
