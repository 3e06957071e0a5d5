"""Optional LLM judge: a model (local or OpenAI-compatible) labels each answer CORRECT or WRONG against
the gold answer. Enabled by `judge:` in an experiment; the runner logs its model and prompt with every
cell (params `judge.*`, artifact judge_prompt.txt) and the metric `judge_score`.

The default prompt follows the generous LoCoMo judge of the Mem0 paper (Chhikara et al., 2025): same
fact or topic counts, other date formats count. Unanswerable questions are not judged (the abstention
detector scores them); for multiple choice the gold is the correct option's text.
"""
from __future__ import annotations

import re

from dkilab.types import QAItem

JUDGE_PROMPT = """Label a generated answer to a question as CORRECT or WRONG. You get the question, the gold answer and the generated answer.
Be generous: the generated answer is CORRECT if it states the same fact or touches the same topic as the gold answer, even if it is longer; a date in another format is CORRECT if it names the same date. It is WRONG if it gives a different fact, says it does not know, or does not answer.

Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

Reply with one word: CORRECT or WRONG."""

_WRONG = re.compile(r"\b(wrong|incorrect)\b|错误|不正确", re.I)
_RIGHT = re.compile(r"\bcorrect\b|正确", re.I)


def parse_verdict(text: str) -> float | None:
    """1.0 for CORRECT, 0.0 for WRONG (whichever the reply states first), None if it states neither."""
    wrong, right = _WRONG.search(text or ""), _RIGHT.search(text or "")
    if wrong and (not right or wrong.start() <= right.start()):
        return 0.0
    return 1.0 if right else None


def gold_text(item: QAItem) -> str:
    if item.choices and item.answer in item.choices:
        return str(item.choices[item.answer])
    return str(item.answer)


def check_prompt(prompt: str) -> str:
    """The prompt, if it has every placeholder the judge fills; else ValueError naming the missing ones."""
    missing = [f for f in ("{question}", "{gold}", "{prediction}") if f not in prompt]
    if missing:
        raise ValueError(f"judge prompt lacks the placeholder(s) {', '.join(missing)}")
    return prompt


class LLMJudge:
    def __init__(self, model, prompt: str | None = None, max_new_tokens: int = 6):
        self.model, self.prompt, self.max_new_tokens = model, check_prompt(prompt or JUDGE_PROMPT), max_new_tokens

    def judge(self, item: QAItem, prediction: str) -> tuple[float | None, str]:
        """(verdict, the judge's raw reply); None when the question is unanswerable or the reply unclear."""
        if not item.answerable or item.answer is None:
            return None, ""
        text = self.prompt.format(question=item.question, gold=gold_text(item), prediction=prediction or "")
        reply = self.model.generate([{"role": "user", "content": text}], max_new_tokens=self.max_new_tokens)
        return parse_verdict(reply), reply
