"""LongMemEval's own answer check, as a judge protocol (`judge: {protocol: longmemeval, prompts_from: PATH}`).

LongMemEval scores a reply with an LLM and a yes/no prompt picked by the question's type: one for the
single-session and multi-session types, one for temporal reasoning (an off-by-one in a count of days is not
penalised), one for knowledge updates (a reply that also names the old value counts if it gives the new one),
a rubric for preferences, and one for abstention questions (`_abs`), which are judged too, against the
explanation of why they cannot be answered. Its verdict is "yes" anywhere in the lower-cased reply; its
accuracy is over every question (`judge_accuracy`).

dkilab ships none of that prompt text. `prompts_from` names the user's copy of the official evaluation script
(`src/evaluation/evaluate_qa.py` of github.com/xiaowu0162/LongMemEval). Nothing in that file runs: its
`get_anscheck_prompt` function is read from its syntax tree (`_Reader`): the if/elif chain over the task and
`abstention`, the string assigned to `template` and the `template.format(question, answer, response)` call are
followed once per question type with placeholders; a decorator, a default argument or any other statement is
never evaluated, and one the reader does not know is refused naming its line. The templates are used as they
are; their digest is part of every judged cell's identity.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.config import ConfigError
from dkilab.eval.scoring.base import declare
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
def _templates(path: str, stamp: tuple) -> dict[str, str]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"judge.prompts_from {path}: cannot read it as Python ({exc})") from None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION), None)
    if fn is None:
        raise ConfigError(f"judge.prompts_from {path}: no function {FUNCTION}() (expected LongMemEval's {SCRIPT})")
    out = {}
    for kind in (*QUESTION_TYPES, ABSTENTION):
        task = QUESTION_TYPES[0] if kind == ABSTENTION else kind
        try:
            text = _Reader(fn, task, kind == ABSTENTION).result()
        except _Unread as exc:  # the user's script: name it, the line and the type
            raise ConfigError(f"judge.prompts_from {path}: {FUNCTION}({task!r}, abstention={kind == ABSTENTION}): "
                              f"{exc}") from None
        if not isinstance(text, str) or not all(p in text for p in (_Q, _G, _P)):
            raise ConfigError(f"judge.prompts_from {path}: {FUNCTION} for {kind!r} does not place the question, "
                              "the answer and the response in its prompt")
        out[kind] = text
    return out


class _Unread(Exception):
    pass


class _Reader:
    """The value `get_anscheck_prompt(task, <question>, <answer>, <response>, abstention)` returns, read from the
    function's syntax tree without running it: if/elif/else on comparisons of the arguments with constants, names
    assigned strings (constants, `+`, implicit concatenation) or `<str>.format(...)` of names and constants,
    `return`, `raise` (no template for that type) and `pass`. Anything else is refused with its line."""

    def __init__(self, fn: ast.FunctionDef, task: str, abstention: bool):
        names = [a.arg for a in fn.args.args]
        if len(names) < 4:
            raise _Unread(f"line {fn.lineno}: expected (task, question, answer, response, abstention=...)")
        self.fn = fn
        self.env: dict[str, object] = dict(zip(names, (task, _Q, _G, _P, abstention)))
        self.env.setdefault("abstention", abstention)

    def result(self) -> object:
        found = self._block(self.fn.body)
        if found is None:
            raise _Unread("the function returns nothing for it")
        return found[0]

    def _block(self, body: list[ast.stmt]) -> tuple[object] | None:
        for node in body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            if isinstance(node, ast.Pass):
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.env[node.targets[0].id] = self._value(node.value)
            elif isinstance(node, ast.If):
                found = self._block(node.body if self._value(node.test) else node.orelse)
                if found is not None:
                    return found
            elif isinstance(node, ast.Return) and node.value is not None:
                return (self._value(node.value),)
            elif isinstance(node, ast.Raise):
                raise _Unread(f"line {node.lineno}: the function raises for it (no template)")
            else:
                raise _Unread(f"line {node.lineno}: {type(node).__name__} is not read (dkilab runs nothing of the "
                              "script: only an if/elif chain choosing a template string)")
        return None

    def _value(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, int, type(None))):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.env:
            return self.env[node.id]
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self._value(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self._value(node.operand)
        if isinstance(node, ast.BoolOp):
            values = [self._value(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._value(node.left), self._value(node.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right, op = self._value(node.left), self._value(node.comparators[0]), node.ops[0]
            if isinstance(op, (ast.Eq, ast.NotEq)):
                return (left == right) == isinstance(op, ast.Eq)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (list, str)):
                return (left in right) == isinstance(op, ast.In)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                and not node.keywords):
            template = self._value(node.func.value)
            if isinstance(template, str):
                args = [self._value(a) for a in node.args]
                if all(isinstance(a, str) for a in args):
                    try:
                        return template.format(*args)
                    except (IndexError, KeyError, ValueError) as exc:
                        raise _Unread(f"line {node.lineno}: the template does not format ({exc})") from None
        raise _Unread(f"line {node.lineno}: {ast.unparse(node)[:80]!r} is not read (dkilab runs nothing of the "
                      "script: only an if/elif chain choosing a template string)")


def load_templates(path: str | Path) -> dict[str, str]:
    """The answer-check template of each question type and of abstention, read from the script at `path`."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"judge.prompts_from: {p} does not exist (LongMemEval's {SCRIPT})")
    return _templates(str(p.resolve()), stat_key(p))


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
