"""LongMemEval's own answer check, as a judge protocol (`judge: {protocol: longmemeval, prompts_from: PATH}`).

LongMemEval scores a reply with an LLM and a yes/no prompt picked by the question's type: one for the
single-session and multi-session types, one for temporal reasoning (an off-by-one in a count of days is not
penalised), one for knowledge updates (a reply that also names the old value counts if it gives the new one),
a rubric for preferences, and one for abstention questions (`_abs`), which are judged too, against the
explanation of why they cannot be answered. Its verdict is "yes" anywhere in the lower-cased reply; its
accuracy is over every question (`judge_accuracy`).

dkilab ships none of that prompt text. `prompts_from` names the user's copy of the official evaluation script
(`src/evaluation/evaluate_qa.py` of github.com/xiaowu0162/LongMemEval); its `get_anscheck_prompt` function,
compiled alone (nothing else in the file runs), is called once per question type with placeholders, and the
templates it returns are used as they are. Their digest is part of every judged cell's identity.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from dkilab.config import ConfigError
from dkilab.eval.metrics.base import declare
from dkilab.types import QAItem

QUESTION_TYPES = ("single-session-user", "single-session-assistant", "multi-session", "temporal-reasoning",
                  "knowledge-update", "single-session-preference")
ABSTENTION = "abstention"  # the template of the `_abs` questions
FUNCTION = "get_anscheck_prompt"
SCRIPT = "src/evaluation/evaluate_qa.py of github.com/xiaowu0162/LongMemEval"
_Q, _G, _P = "\x00question\x00", "\x00gold\x00", "\x00prediction\x00"

declare("judge_accuracy", group="answers", field="judge_all", higher_is_better=True, per_category=True, rank=6,
        description="share of all questions the judge accepts, unanswerable ones included "
                    "(LongMemEval's accuracy, under `judge: {protocol: longmemeval}`)")


@functools.lru_cache(maxsize=8)
def _templates(path: str, mtime_ns: int) -> dict[str, str]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"judge.prompts_from {path}: cannot read it as Python ({exc})") from None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION), None)
    if fn is None:
        raise ConfigError(f"judge.prompts_from {path}: no function {FUNCTION}() (expected LongMemEval's {SCRIPT})")
    namespace: dict = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)  # the function alone
    out = {}
    for kind in (*QUESTION_TYPES, ABSTENTION):
        task = QUESTION_TYPES[0] if kind == ABSTENTION else kind
        try:
            text = namespace[FUNCTION](task, _Q, _G, _P, abstention=kind == ABSTENTION)
        except Exception as exc:  # the user's script: name it and the type
            raise ConfigError(f"judge.prompts_from {path}: {FUNCTION}({task!r}, abstention={kind == ABSTENTION}) "
                              f"raised {type(exc).__name__}: {exc}") from None
        if not isinstance(text, str) or not all(p in text for p in (_Q, _G, _P)):
            raise ConfigError(f"judge.prompts_from {path}: {FUNCTION} for {kind!r} does not place the question, "
                              "the answer and the response in its prompt")
        out[kind] = text
    return out


def load_templates(path: str | Path) -> dict[str, str]:
    """The answer-check template of each question type and of abstention, read from the script at `path`."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"judge.prompts_from: {p} does not exist (LongMemEval's {SCRIPT})")
    return _templates(str(p.resolve()), p.stat().st_mtime_ns)


def readable(text: str) -> str:
    """A template as a person reads it: {question}, {gold} and {prediction} where the answers go."""
    return text.replace(_Q, "{question}").replace(_G, "{gold}").replace(_P, "{prediction}")


def digest(templates: dict[str, str]) -> str:
    return hashlib.sha1(json.dumps(templates, sort_keys=True).encode()).hexdigest()[:12]


def check_text(templates: dict[str, str], item: QAItem, prediction: str) -> str:
    """The prompt the judge gets for `item`: its type's template (abstention's for an unanswerable question,
    with the explanation as the answer), filled in."""
    if not item.answerable:
        template, gold = templates[ABSTENTION], str(item.metadata.get("explanation") or "")
    elif str(item.category) in templates:
        template, gold = templates[str(item.category)], str(item.answer)
    else:
        raise ValueError(f"question {item.qid or item.question[:40]!r}: LongMemEval has no answer check for the type "
                         f"{item.category!r} (its types: {', '.join(QUESTION_TYPES)})")
    return template.replace(_Q, item.question).replace(_G, gold).replace(_P, prediction or "")


def verdict(reply: str) -> float:
    """The official reading: correct when "yes" occurs anywhere in the lower-cased reply."""
    return 1.0 if "yes" in (reply or "").lower() else 0.0


class LongMemEval:
    """The protocol a judge follows: the prompt of an answer, and the verdict of a reply."""

    name = "longmemeval"
    judges_all = True  # abstention questions too, against their explanation

    def __init__(self, templates: dict[str, str]):
        self.templates = templates

    def text(self, item: QAItem, prediction: str, gold: str) -> str:
        return check_text(self.templates, item, prediction)

    def verdict(self, reply: str) -> float:
        return verdict(reply)
