"""The judge stress probes held against the LoCoMo audit's intentionally wrong answers (needs DKILAB_DATA_DIR with
locomo_audit/): for every one of the 1,540 questions, the audit's specific-but-wrong (ap-baseline v1) and
vague-but-topical (v2) answers beside dkilab's `wrong` and `vague` probes for the same question, each read by
the official LoCoMo score (token F1; accepted at 0.5 or more), with the published judge's acceptance of the
audit's answers (2 of 3 verdicts). Probes accepted less often than the audit's answers by the same reader are
easier to reject than the audit's.

    python experiments/bench/judge_probes_audit.py
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from dkilab.eval.scoring import judge_stress as js
from dkilab.eval.scoring.qa import locomo_score
from dkilab.types import QAItem


def _answers(version: str) -> list[dict]:
    base = Path(os.environ["DKILAB_DATA_DIR"]) / "locomo_audit" / "ap-baseline"
    path = base / version / "ap_eval_results_scored.json"
    return [e for entries in json.loads(path.read_text())["detailed_results"].values() for e in entries]


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def main() -> None:
    for kind, version in (("wrong", "v1"), ("vague", "v2")):
        rows = _answers(version)
        judged = [sum(e["llm_judgments"].values()) >= 2 for e in rows]
        audit = [locomo_score(e["generated_answer"], str(e["golden_answer"]), int(e["category"])) for e in rows]
        probe = []
        for e in rows:
            gold = str(e["golden_answer"])
            text = js.probes(QAItem(e["question"], gold, qid=e["question_id"]), gold).get(kind)
            if text is not None:
                probe.append(locomo_score(text, gold, int(e["category"])))
        print(f"{kind} ({version}): {len(rows)} audit answers, published judge accepts {_share(judged):.3f}; "
              f"LoCoMo F1 accepts {_share([f >= 0.5 for f in audit]):.3f} of them and "
              f"{_share([f >= 0.5 for f in probe]):.3f} of {len(probe)} probes (mean F1 {_share(audit):.3f} vs "
              f"{_share(probe):.3f})")


if __name__ == "__main__":
    main()
