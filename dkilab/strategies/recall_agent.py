"""recall_agent: the recall agent (seed recall-agent.md) as a strategy. The agent builds a memory view
with verbatim evidence from the four query tools; the model answers from the view (visible text, or a
K/V block with `view_alpha`) plus the evidence messages as the history suffix.

`answer: false` stops after the view: the cell is scored on the view alone (view recall/precision,
evidence validity, adjudication, tool calls), and the rule policy then needs no model.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from dkilab import prompts as text
from dkilab.agents.recall_agent import RecallAgent
from dkilab.agents.recall_agent.conflict_set import card
from dkilab.agents.recall_agent.skill import load_skill
from dkilab.config import knob
from dkilab.prompts import VIEW_HEAD  # prompt texts: dkilab/prompts.py
from dkilab.prompts import VIEW_KIND as KIND
from dkilab.prompts import VIEW_UNCERTAIN as UNCERTAIN
from dkilab.recall import create_formatter
from dkilab.strategies.base import (
    Strategy,
    StrategyParams,
    history_block,
    language_of,
    newest_that_fit,
    preferences_text,
    question_text,
    register,
)
from dkilab.types import Answer


class RecallAgentParams(StrategyParams):
    policy: Literal["rule", "llm"] = "rule"
    answer: bool = True  # false: the memory view only (scored by the view metrics)
    view_as: Literal["text", "kv"] = "text"
    view_alpha: float = Field(1.0, ge=0.0)  # alpha of the view block when view_as = kv
    max_calls: int = Field(12, ge=1, le=50)
    max_items: int = Field(5, ge=1, le=50)
    default_days: int | None = Field(30, ge=1)  # the window when the question has no time cue (None: all time)
    policy_max_new_tokens: int = Field(96, ge=8, le=1024)
    skill: str | None = knob(None, off=None)  # a recall skill file (default: the packaged one)

    @field_validator("skill")
    @classmethod
    def _skill_loads(cls, v: str | None) -> str | None:
        if v is not None:
            load_skill(v)  # a missing file or a bad front matter is refused when the config is read
        return v


def view_text(output, lang: str) -> str:
    lines = [VIEW_HEAD[lang]]
    for kind in ("preferences", "profile", "constraints"):
        for item in getattr(output.memory_view, kind):
            if item.active:
                lines.append(f"- [{KIND[lang][kind]}] {item.statement}" + (UNCERTAIN[lang] if item.uncertain else ""))
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


@register
class RecallAgentStrategy(Strategy):
    name = "recall_agent"
    # 2: a later, weaker statement no longer supersedes an explicit constraint
    # 3: the closed loop of §4 (own queries per hypothesis, narrowing, rewriting, coverage, both-side conflicts);
    #    the LLM policy reads the recall skill and raw tool results
    # 5: explicit standing statements before the window, slots (car, editor, pets with a change), "always" as
    #    explicit as "never", the LLM policy's adjudication stands
    version = "5"  # what each version changed: docs/agents.md
    Params = RecallAgentParams
    params: RecallAgentParams
    takes_task_inputs = True

    def cards(self) -> dict:
        return {"conflicts": card()}

    @property
    def output_kind(self) -> str:
        return "answer" if self.params.answer else "memory_view"

    def requires_model(self) -> bool:
        return self.params.answer or self.params.policy == "llm"

    def prompts(self, model_name: str = "") -> dict[str, str]:
        out = super().prompts(model_name) | {f"view_head.{k}": v for k, v in text.VIEW_HEAD.items()}
        out |= {f"view_kind.{lang}.{k}": v for lang, kinds in text.VIEW_KIND.items() for k, v in kinds.items()}
        out |= {f"view_uncertain.{k}": v for k, v in text.VIEW_UNCERTAIN.items()}
        if self.params.policy != "llm":
            return out

        return out | {"policy.plan": text.AGENT_PLAN, "policy.synthesis": text.AGENT_SYNTH,
                      "policy.skill": load_skill(self.params.skill).text}

    def needs_kv(self, preferences: bool = True) -> bool:
        return self.params.view_as == "kv"

    def generates_in_assembly(self) -> bool:
        return self.params.policy == "llm"

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        lang, p = language_of(question), self.params
        with stages("recall", question=question) as trace:
            formatter = create_formatter(model.name, lang) if p.policy == "llm" else None
            agent = RecallAgent(memory, p.policy, model, formatter, p.max_calls, p.max_items, p.default_days, p.skill)
            if p.policy == "llm":
                agent.policy.max_new_tokens = p.policy_max_new_tokens
            result = agent.recall(question, now=asked_at)
            out = result.output
            trace.update(memory_view=out.memory_view.model_dump(mode="json"), stop=result.stop_reason,
                         documents=[{"page_content": e.content, "id": e.message_id,
                                     "metadata": {"role": e.role, "timestamp": str(e.timestamp), "signal": "agent"}}
                                    for e in out.evidence])
        review = {"memory_view": out.model_dump(mode="json"), "evidence_problems": result.evidence_problems,
                  "agent_stop": result.stop_reason}
        meta = {"agent_tool_calls": result.tool_calls, "agent_rounds": result.rounds,
                "policy_steps": result.policy_steps, "policy_fallbacks": result.policy_fallbacks,
                "agent_steps": result.steps}
        evidence_ids = [e.message_id for e in out.evidence]
        if not p.answer:
            return Answer("", recalled_ids=evidence_ids, rounds=0, metadata=meta, review=review)
        with stages("assembly"):
            view = view_text(out, lang)
            pref = preferences_text(preferences, lang)
            # the view shown as text takes its room from the matched history budget; the evidence fills the rest
            reserved = {"memory_view": model.count_tokens(view) + 1} if p.view_as == "text" and view else {}
            budget = self.budget(model, question, lang, pref, reserved=reserved)
            msgs = sorted((memory.get(i) for i in evidence_ids), key=lambda m: (m.timestamp, m.turn_id))
            shown, budget.used = newest_that_fit(msgs, model, budget.history, lang, self.fields)
            history = history_block(shown, lang, self.fields)
            memories = None
            visible = pref + view
            if p.view_as == "kv" and view:
                self.require_kv(model, "the memory view")
                memories, visible = [(self.memory_kv(model, view), p.view_alpha)], pref
            user_text = (visible + "\n" if visible else "") + question_text(question, lang, history)
        with stages("generation"):
            gen, prompt = self.generate(model, user_text, lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in shown],
                      context_text="\n".join(x for x in (pref, view, history) if x), prompt=prompt, budget=budget,
                      metadata=meta, review=review)
