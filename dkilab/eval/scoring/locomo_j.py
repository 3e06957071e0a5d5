"""The LoCoMo "J" judge of the published memory-system evaluations, as a judge protocol
(`judge: {protocol: locomo_j, prompts_from: PATH}`).

Mem0's evaluation (Chhikara et al., 2025; github.com/mem0ai/mem0, `evaluation/metrics/llm_judge.py`), whose
numbers the Zep, Letta and later memory papers set theirs beside, has gpt-4o-mini label each generated answer
CORRECT or WRONG against the gold with one generous prompt (`ACCURACY_PROMPT`, placeholders `{question}`,
`{gold_answer}`, `{generated_answer}`), asks for JSON and reads its `label`; categories 1-4 are judged and
category 5 (adversarial, unanswerable) is left out of J, so here it is reported apart by the hallucination metrics.
The J score of a cell is then its `judge_score`.

dkilab ships none of that prompt text: `prompts_from` names the user's copy of that file, whose `ACCURACY_PROMPT`
string is read as a literal (nothing in the file runs). A reply that is not JSON (small local judges) is read by
the first label it names, and counts as unparsed when it names none.
"""
from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.config import ConfigError
from dkilab.eval.scoring.judge import parse_verdict
from dkilab.types import QAItem

CONSTANT = "ACCURACY_PROMPT"
SCRIPT = "evaluation/metrics/llm_judge.py of github.com/mem0ai/mem0"
FIELDS = ("{question}", "{gold_answer}", "{generated_answer}")
_JSON = re.compile(r"\{[^{}]*\}")


@functools.lru_cache(maxsize=8)
def _template(path: str, stamp: tuple) -> str:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"judge.prompts_from {path}: cannot read it as Python ({exc})") from None
    found: list[tuple[int, ast.expr]] = []  # (line, value) of each assignment, plain or annotated
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == CONSTANT for t in node.targets):
            found.append((node.lineno, node.value))
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == CONSTANT
              and node.value is not None):
            found.append((node.lineno, node.value))
    if len(found) > 1:  # Python would take the last, a reader the first: neither is safe to guess
        raise ConfigError(f"judge.prompts_from {path}: {CONSTANT} is assigned {len(found)} times (lines "
                          f"{', '.join(str(line) for line, _ in found)}); keep one")
    for _, value in found:
        try:
            text = ast.literal_eval(value)
        except ValueError:
            text = None
        if not isinstance(text, str) or not all(f in text for f in FIELDS):
            raise ConfigError(f"judge.prompts_from {path}: {CONSTANT} is not a string with {', '.join(FIELDS)}")
        return text
    raise ConfigError(f"judge.prompts_from {path}: no {CONSTANT} string (expected mem0's {SCRIPT})")


def load_template(path: str | Path) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"judge.prompts_from: {p} does not exist (mem0's {SCRIPT})")
    return _template(str(p.resolve()), stat_key(p))


class LocomoJ:
    """The protocol a judge follows: the prompt of an answer, and the verdict of a reply."""

    name = "locomo_j"
    judges_all = False  # categories 1-4 only: the answerable questions, as the default judge

    def __init__(self, template: str):
        self.template = template

    def text(self, item: QAItem, prediction: str, gold: str) -> str:
        return (self.template.replace("{question}", item.question).replace("{gold_answer}", gold)
                .replace("{generated_answer}", prediction or ""))

    def verdict(self, reply: str) -> float | None:
        """1.0 for CORRECT, 0.0 for WRONG: the JSON `label` where the reply holds one, else the first label it
        names; None for neither."""
        for blob in _JSON.findall(reply or ""):
            try:
                label = json.loads(blob).get("label")
            except (ValueError, AttributeError):
                continue
            if isinstance(label, str) and label.strip().upper() in ("CORRECT", "WRONG"):
                return 1.0 if label.strip().upper() == "CORRECT" else 0.0
        return parse_verdict(reply)
