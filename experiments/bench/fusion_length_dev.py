"""Which message-length feature transfers across data kinds (issue 59), on dev rows only.

The fusion model weighed a candidate's absolute length (`log_chars`, the feature before `chars_share`) +0.75 for
English questions: in LoCoMo a long turn is more often evidence, but in long user-assistant work sessions every
assistant answer is long and half the facts are a user's short instruction, so the answer next to the evidence
took the first rank (`fusion_features_dev.py`). This study sets the length column (`chars_share`) of the dev
rows that `dkilab bench retrieval --leave-one-dataset-out` collects (and caches) to each variant below, from the
messages' own lengths, then, for each dev source in turn,
fits the shipped structure (`lodo.fit_parts`) on the *other* sources' dev rows and scores the held-out
source's dev rows. Test splits are never read.

- `absolute`: log(1 + characters), as shipped;
- `role_candidates`: that minus the mean over the question's candidates of the same role (a user's turn
  against the user's candidates, an answer against the answers);
- `role_store`: that minus the mean over all of the user's stored messages of the same role;
- `question_z`: the per-question z-score of the length over all candidates;
- `role_z`: the z-score over the question's candidates of the same role;
- `question_pct`: the share of the question's candidates shorter than it (what `chars_share` is now);
- `none`: the column held at 0 (no length feature).

    python experiments/bench/fusion_length_dev.py [--data-dir DIR]

A dev study (`purpose: tune` data only); what it prints is what docs/retrieval.md quotes.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

VARIANTS = ("absolute", "role_candidates", "role_store", "question_z", "role_z", "question_pct", "none")


def messages(datasets: set[str], data_dir) -> dict[str, tuple[str, str, float]]:
    """{message id: (user, role, log(1 + characters))} of every conversation of `datasets`."""
    from dkilab.eval.data import load_dataset

    out = {}
    for name in sorted(datasets):
        for conv in load_dataset(name, data_dir):
            for m in conv.messages:
                out[m.message_id] = (conv.user_id, m.role, math.log1p(len(m.content)))
    return out


def store_means(msgs: dict[str, tuple[str, str, float]]) -> dict[tuple[str, str], float]:
    """{(user, role): mean log length of the user's messages of that role}."""
    sums: dict[tuple[str, str], list[float]] = {}
    for user, role, v in msgs.values():
        sums.setdefault((user, role), []).append(v)
    return {k: float(np.mean(v)) for k, v in sums.items()}


def with_variant(rows: list[dict], variant: str, msgs, means) -> list[dict]:
    """`rows` with the length column replaced by `variant`."""
    from dkilab.recall.learned import FEATURES

    col = FEATURES.index("chars_share")
    out = []
    for r in rows:
        X = r["X"].copy()
        v = np.array([msgs[i][2] for i in r["ids"]])
        X[:, col] = v
        if variant == "role_candidates":
            roles = np.array([msgs[i][1] for i in r["ids"]])
            X[:, col] = v - np.array([v[roles == role].mean() for role in roles])
        elif variant == "role_store":
            X[:, col] = v - np.array([means[msgs[i][:2]] for i in r["ids"]])
        elif variant == "question_z":
            X[:, col] = (v - v.mean()) / (v.std() + 1e-6)
        elif variant == "role_z":
            roles = np.array([msgs[i][1] for i in r["ids"]])
            X[:, col] = np.array([(x - v[roles == role].mean()) / (v[roles == role].std() + 1e-6)
                                  for x, role in zip(v, roles)])
        elif variant == "question_pct":
            X[:, col] = np.array([(v < x).mean() for x in v])
        elif variant == "none":
            X[:, col] = 0.0
        out.append({**r, "X": X})
    return out


def main() -> None:
    from dkilab.bench import lodo

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = ap.parse_args()
    dev, _ = lodo.collect_all(args.data_dir, echo=lambda _: None)
    msgs = messages({r["dataset"] for r in dev}, args.data_dir)
    means = store_means(msgs)
    print("dev rows only; each dev source scored by the structure fitted on the other sources' dev rows")
    table = {v: lodo.dev_held_out(with_variant(dev, v, msgs, means)) for v in args.variants}
    for line in lodo.dev_lines(table):
        print(line)


if __name__ == "__main__":
    main()
