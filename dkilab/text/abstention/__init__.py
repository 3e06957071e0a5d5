"""The abstention detector, one package: does an answer decline? (`docs/hallucination.md`)

- `clauses`: the answer cut into filler, absence and content clauses, and the structural detector (the rules alone,
  `abstention_detector: structural`);
- `rules`: the sure rules of the hybrid detector (`rule_decision`, `RULES_VERSION`), reading the `masked` view;
- `commit`: whether a reply commits to a value (rules version 14), run first, and the reply's kind (abstain, answer,
  hedged_guess);
- `learned`: the hybrid detector (the default): the sure rules, then a logistic regression over e5 vectors whose
  weights ship as `lr.json` (refitted by `dkilab bench abstention --train`, `dkilab/bench/abstention_train.py`).

    from dkilab.text.abstention import get_detector
    get_detector().decide("I have no record of that.")   # (True, "learned")
"""
from dkilab.text.abstention.clauses import DETECTOR, StructuralDetector, clauses, is_abstention
from dkilab.text.abstention.commit import commitment, reply_kind, sure_decision
from dkilab.text.abstention.learned import DEFAULT_DETECTOR, DETECTOR_NAMES, HybridDetector, get_detector, load_weights
from dkilab.text.abstention.rules import RULES_VERSION, rule_decision

__all__ = ["DETECTOR", "DEFAULT_DETECTOR", "DETECTOR_NAMES", "HybridDetector", "RULES_VERSION", "StructuralDetector",
           "clauses", "commitment", "get_detector", "is_abstention", "load_weights", "reply_kind", "rule_decision",
           "sure_decision"]
