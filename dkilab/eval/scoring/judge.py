"""Optional LLM judge: a model (local or OpenAI-compatible) labels each answer CORRECT or WRONG against
the gold answer. Enabled by `judge:` in an experiment; the runner logs its model and prompt with every
cell (params `judge.*`, artifact judge_prompt.txt) and the metric `judge_score`.

The default prompt follows the generous LoCoMo judge of the Mem0 paper (Chhikara et al., 2025): same
fact or topic counts, other date formats count. Unanswerable questions are not judged (the abstention
detector scores them); for multiple choice the gold is the correct option's text.
"""
from __future__ import annotations

import re
from typing import Any

from dkilab.eval.scoring.base import declare
from dkilab.eval.scoring.judge_stress import probes, row_fields
from dkilab.progress import Progress
from dkilab.prompts import ABSTENTION_PROMPT, JUDGE_PROMPT  # prompt texts: dkilab/prompts.py
from dkilab.types import BatchModel, ChatModel, QAItem

declare("judge_score", group="answers",
        field="judge", subset="answerable", higher_is_better=True, per_category=True, rank=5,
        description="share of answerable questions the LLM judge labels CORRECT")
declare("judge_unparsed_rate", group="judge", field="judge_unparsed", subset="answerable", higher_is_better=False,
        description="judge replies that named neither CORRECT nor WRONG")
declare("abstention_judge_unparsed_rate", group="judge", field="abstention_judge_unparsed", higher_is_better=False,
        description="abstention-judge replies that named neither label (the rules decided those)")


_WRONG = re.compile(r"\b(wrong|incorrect)\b|错误|不正确", re.I)
_RIGHT = re.compile(r"\bcorrect\b|正确", re.I)


def first_label(text: str, first, second):
    """Which of two label patterns the reply states first: True for `first`, False for `second`, None
    for neither (a judge may explain itself; its first label counts)."""
    a, b = first.search(text or ""), second.search(text or "")
    if a and (not b or a.start() <= b.start()):
        return True
    return False if b else None


def parse_verdict(text: str) -> float | None:
    """1.0 for CORRECT, 0.0 for WRONG (whichever the reply states first), None if it states neither."""
    wrong = first_label(text, _WRONG, _RIGHT)
    return None if wrong is None else 0.0 if wrong else 1.0



_DECLINES = re.compile(r"\bdeclin|\babstain|拒绝|未回答", re.I)
_ANSWERS = re.compile(r"\banswers?\b|回答了", re.I)


def parse_abstention(text: str) -> bool | None:
    """True for DECLINES, False for ANSWERS (whichever the reply states first), None if neither."""
    return first_label(text, _DECLINES, _ANSWERS)


def gold_text(item: QAItem) -> str:
    if item.choices and item.answer in item.choices:
        return str(item.choices[item.answer])
    return str(item.answer)


def check_prompt(prompt: str, fields: tuple[str, ...] = ("{question}", "{gold}", "{prediction}")) -> str:
    """The prompt, if it has every placeholder the judge fills; else ValueError naming the missing ones."""
    missing = [f for f in fields if f not in prompt]
    if missing:
        raise ValueError(f"judge prompt lacks the placeholder(s) {', '.join(missing)}")
    return prompt


class LLMJudge:
    """`protocol`: a published judge protocol (`longmemeval_check.LongMemEval`, `locomo_j.LocomoJ`) that gives
    the prompt of each answer and reads the verdict of each reply, instead of `prompt` and CORRECT/WRONG."""

    def __init__(self, model: ChatModel, prompt: str | None = None, max_new_tokens: int = 6,
                 abstention_prompt: str | None = None, abstention: bool = False, protocol: Any = None,
                 stress: bool = False):
        self.model, self.prompt, self.max_new_tokens = model, check_prompt(prompt or JUDGE_PROMPT), max_new_tokens
        self.abstention_prompt = check_prompt(abstention_prompt or ABSTENTION_PROMPT, ("{question}", "{prediction}"))
        self.abstention = abstention  # also label abstention (DECLINES / ANSWERS) for the hallucination metrics
        self.replies: dict[str, str] = {}  # prompt text -> reply generated ahead in a batch (`prefetch`)
        self.protocol = protocol
        self.stress = stress  # also judge the probes of each judged answer (judge_stress.py)

    @property
    def judges_all(self) -> bool:
        """Whether every answer is judged (LongMemEval's protocol), not only answers to answerable questions."""
        return bool(self.protocol is not None and self.protocol.judges_all)

    def abstains(self, question: str, prediction: str) -> tuple[bool | None, str]:
        """(does the answer decline?, the judge's raw reply); None when the reply names neither label."""
        reply = self._reply(self.abstention_text(question, prediction))
        return parse_abstention(reply), reply

    def judge(self, item: QAItem, prediction: str) -> tuple[float | None, str]:
        """(verdict, the judge's raw reply); None when the question is unanswerable or the reply unclear (under
        LongMemEval's protocol every question gets 1 or 0)."""
        if not self.judges_all and (not item.answerable or item.answer is None):
            return None, ""
        reply = self._reply(self.judge_text(item, prediction))
        return (parse_verdict(reply) if self.protocol is None else self.protocol.verdict(reply)), reply

    def probes(self, item: QAItem) -> dict[str, str]:
        """The stress probes of a judged answer's question (none without a gold)."""
        return probes(item, gold_text(item)) if self.stress and item.answerable and item.answer is not None else {}

    def judge_probes(self, item: QAItem) -> dict[str, float]:
        """The row fields of the judge's verdicts on the question's probes."""
        return row_fields({kind: self.judge(item, text)[0] for kind, text in self.probes(item).items()})

    def judge_text(self, item: QAItem, prediction: str) -> str:
        if self.protocol is not None:
            return self.protocol.text(item, prediction, gold_text(item) if item.answer is not None else "")
        return self.prompt.format(question=item.question, gold=gold_text(item), prediction=prediction or "")

    def abstention_text(self, question: str, prediction: str) -> str:
        return self.abstention_prompt.format(question=question, prediction=prediction or "")

    def prefetch(self, texts: list[str], batch_size: int = 8) -> int:
        """Generate the replies to `texts` together (batches of `batch_size` through the model's
        `generate_batch`, a served judge's concurrent requests: greedy, so each reply equals the one-by-one
        reply); `judge` / `abstains` then read them. -> replies generated."""
        todo = [t for t in dict.fromkeys(texts) if t not in self.replies]
        if not isinstance(self.model, BatchModel) or not todo:
            return 0
        bar = Progress(len(todo), "judge", unit="prompts", enabled=len(todo) > batch_size)
        for i in range(0, len(todo), batch_size):
            chunk = todo[i:i + batch_size]
            gens = self.model.generate_batch([[{"role": "user", "content": t}] for t in chunk],
                                             max_new_tokens=self.max_new_tokens)
            self.replies.update({t: g.text for t, g in zip(chunk, gens)})
            bar.update(len(chunk))
        bar.close()
        return len(todo)

    def ask(self, text: str) -> str:
        """The judge's reply to a prompt of its own (a scorer's; generated ahead by `prefetch` when it can)."""
        return self._reply(text)

    def _reply(self, text: str) -> str:
        if text in self.replies:
            return self.replies[text]
        return self.model.generate([{"role": "user", "content": text}], max_new_tokens=self.max_new_tokens)
