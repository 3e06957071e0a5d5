"""Write dkilab/eval/harness/fitted_on.json: by content, the conversations each shipped fitted component was fitted on
(dkilab/eval/harness/fitted.py refuses any cell that asks about one of them, however its dataset is named).

    DKILAB_DATA_DIR=../shared/datasets python scripts/fitted_digests.py [--check]

The learned fusion model: the dev splits of bench/fusion_train.DEV, and the sha1 of the shipped
dkilab/recall/fusion_lr.json it describes (a refit rewrites both); the LoCoMo adapter: LoCoMo dev (0-4).
With --check it exits 1 when the file differs from what the data gives (tests/eval/harness/test_fitted_content.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

from dkilab.bench.fusion_train import DEV
from dkilab.eval.harness.fitted import RECORD, _asked_digests
from dkilab.recall.learned import DEFAULT_MODEL


def record(data_dir: str) -> dict:
    def digests(specs) -> list[str]:
        out: set[str] = set()
        for d in specs:
            out |= set(_asked_digests(d["name"], None, 0, d.get("limit"), d["split"], data_dir, data_dir))
        return sorted(out)

    return {"fusion": {"sha1": hashlib.sha1(DEFAULT_MODEL.read_bytes()).hexdigest(), "conversations": digests(DEV)},
            "adapter": {"conversations": digests([{"name": "locomo", "split": "dev"}])}}


def main(argv: list[str]) -> int:
    data_dir = os.environ.get("DKILAB_DATA_DIR")
    if not data_dir:
        print("fitted_digests: set DKILAB_DATA_DIR (the datasets the components were fitted on)", file=sys.stderr)
        return 2
    now = record(data_dir)
    if "--check" in argv:
        same = RECORD.is_file() and json.loads(RECORD.read_text(encoding="utf-8")) == now
        print(f"{RECORD}: {'current' if same else 'stale: run scripts/fitted_digests.py'}")
        return 0 if same else 1
    RECORD.write_text(json.dumps(now, indent=1) + "\n", encoding="utf-8")
    print(f"{RECORD}: fusion {len(now['fusion']['conversations'])} conversations, "
          f"adapter {len(now['adapter']['conversations'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
