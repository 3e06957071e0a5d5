"""The LLM judge of the EverMemOS evaluation pipeline, as a judge protocol (`judge: {protocol: evermemos,
prompts_from: PATH}`): the pipeline whose `eval_results.json` files the LoCoMo audit publishes (its full-context
and adversarial baselines; `dkilab import` reads them). Its judge labels each answer CORRECT or WRONG against the
gold with the `llm_judge` prompts of `evaluation/config/prompts.yaml` (a system prompt and a user prompt with
`{question}`, `{golden_answer}`, `{generated_answer}`), asking for one sentence of reasoning and then the label as
JSON under "label".

Its reply is read as that pipeline reads it (`src/evaluators/llm_judge.py`): the JSON in a fenced code block,
else the first object holding "label", else the whole reply as JSON; CORRECT (any case, spaces trimmed) is 1 and
anything else is 0, including a reply with no JSON at all (a bare "CORRECT" counts WRONG there). dkilab ships
none of the prompt text: `prompts_from` names the user's copy of the YAML. The system prompt is sent before the
user prompt in the one message dkilab's judge sends.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from dkilab.cache import stat_key
from dkilab.config import ConfigError, read_yaml
from dkilab.types import QAItem

FILE = "evaluation/config/prompts.yaml of the EverMemOS evaluation pipeline (as in github.com/dial481/locomo-audit)"
FIELDS = ("{question}", "{golden_answer}", "{generated_answer}")
_FENCED = re.compile(r"```(?:json)?\s*(\{[^`]*\})\s*```", re.S)
_LABELLED = re.compile(r'\{[^{}]*"label"\s*:\s*"[^"]*"[^{}]*\}')


@functools.lru_cache(maxsize=8)
def _prompts(path: str, stamp: tuple) -> tuple[str, str]:
    try:
        data = read_yaml(path)
    except ConfigError as exc:
        raise ConfigError(f"judge.prompts_from: cannot read it as YAML ({exc})") from None
    judge = data.get("llm_judge") if isinstance(data, dict) else None
    system, user = (judge.get("system_prompt"), judge.get("user_prompt")) if isinstance(judge, dict) else (None, None)
    if not isinstance(user, str) or not all(f in user for f in FIELDS):
        raise ConfigError(f"judge.prompts_from {path}: no llm_judge.user_prompt with {', '.join(FIELDS)} "
                          f"(expected {FILE})")
    return (system if isinstance(system, str) else "").strip(), user


def load_prompts(path: str | Path) -> tuple[str, str]:
    """(system prompt, user prompt) of the pipeline's judge."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"judge.prompts_from: {p} does not exist ({FILE})")
    return _prompts(str(p.resolve()), stat_key(p))


def verdict(reply: str) -> float:
    """1.0 when the reply's JSON label is CORRECT, else 0.0, extracted as the pipeline extracts it."""
    text = reply or ""
    found = _FENCED.search(text) or _LABELLED.search(text)
    blob = found.group(1) if found and found.re is _FENCED else found.group(0) if found else text.strip()
    try:
        label = json.loads(blob).get("label", "")
    except (ValueError, AttributeError):
        return 0.0
    return 1.0 if isinstance(label, str) and label.strip().upper() == "CORRECT" else 0.0


class EverMemOSJudge:
    """The protocol a judge follows: the prompt of an answer, and the verdict of a reply."""

    name = "evermemos"
    judges_all = False  # the answerable questions (LoCoMo categories 1-4), as the pipeline judges them

    def __init__(self, prompts: tuple[str, str]):
        self.system, self.template = prompts

    def text(self, item: QAItem, prediction: str, gold: str) -> str:
        user = (self.template.replace("{question}", item.question).replace("{golden_answer}", gold)
                .replace("{generated_answer}", prediction or ""))
        return f"{self.system}\n\n{user}" if self.system else user

    def verdict(self, reply: str) -> float:
        return verdict(reply)
