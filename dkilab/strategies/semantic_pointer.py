"""semantic_pointer: the semantic-pointer resolver (seed semantic-pointer.md) as a harness strategy.

The "question" is a vague parameter description; the dataset's task inputs give the agent tree, the
agent and the parameter. The answer is the pointer's resolved description (the original one when it
falls back), scored by the pointer metrics; nothing is generated for the user. `policy: llm` uses the
model for the seed's §3.4.2 synthesis (and §3.4.1 detection with `detect_with_llm`), falling back to
the rule composer on an unusable reply.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from dkilab import prompts as text
from dkilab.agents.semantic_pointer import AgentTree, SemanticPointerConfig, TreeContextResolver, TreeMemory
from dkilab.strategies.base import Strategy, StrategyParams, register
from dkilab.types import Answer


class SemanticPointerParams(StrategyParams):
    policy: Literal["rule", "llm"] = "rule"
    max_ancestor_levels: int = Field(3, ge=1, le=10)
    min_confidence_threshold: float = Field(0.6, ge=0.0, le=1.0)
    detect_with_llm: bool = False
    max_new_tokens: int = Field(160, ge=8, le=1024)


class UserBoundStore:
    """A store view for the resolver that only ever opens the bound user (the harness's user view)."""

    def __init__(self, view):
        self.view = view

    def for_user(self, user_id: str):
        if user_id != self.view.user_id:
            raise PermissionError("this resolver is bound to another user")
        return self.view

    def add_messages(self, messages):
        raise PermissionError("the harness's memory is read-only")


@register
class SemanticPointerStrategy(Strategy):
    name = "semantic_pointer"
    version = "3"  # what each version changed: docs/agents.md
    Params = SemanticPointerParams
    params: SemanticPointerParams
    takes_task_inputs = True
    needs_model = False  # the rule composer; `policy: llm` needs one (requires_model)

    supports_context_only = False  # its output is the task's own (pointers, a session flow), not a prompt

    def requires_model(self) -> bool:
        return self.params.policy == "llm"

    output_kind = "pointer"  # a resolved description, no answer

    def prompts(self, model_name: str = "") -> dict[str, str]:
        return ({"detect": text.POINTER_DETECT_PROMPT, "synthesize": text.POINTER_SYNTH_PROMPT}
                if self.params.policy == "llm" else {})

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        p, task = self.params, task or {}
        missing = [k for k in ("tree", "agent_id", "param_name") if k not in task]
        if missing:
            raise ValueError(f"semantic_pointer needs task inputs {missing} (a dataset like agent_pointers)")
        llm = None
        if p.policy == "llm":
            llm = lambda prompt: model.generate([{"role": "user", "content": prompt}],  # noqa: E731
                                                max_new_tokens=p.max_new_tokens)
        with stages("recall", question=question) as trace:
            config = SemanticPointerConfig(max_ancestor_levels=p.max_ancestor_levels, detect_with_llm=p.detect_with_llm,
                                           min_confidence_threshold=p.min_confidence_threshold)
            resolver = TreeContextResolver(TreeMemory(UserBoundStore(memory)), AgentTree.from_rows(task["tree"]),
                                           config, llm=llm)
            name = task["param_name"]
            found = resolver.resolve_semantic_pointers({name: question}, task.get("current_context", {}),
                                                       task["agent_id"], memory.user_id)
            pointer = found.get(name)
            trace.update(pointer=None if pointer is None else pointer.__dict__)
        resolved = pointer.resolved_desc if pointer else question
        review = {"pointer": {"resolved_desc": resolved, "fell_back": resolved == question,
                                               "confidence": pointer.confidence if pointer else 1.0,
                                               "method": pointer.method if pointer else "no_reference",
                                               "chain": pointer.resolution_chain if pointer else [],
                                               "ambiguous": bool(pointer and pointer.ambiguous),
                                               "contributing_levels": sum(1 for c in (pointer.resolution_chain
                                                                                      if pointer
                                                                                    else [])
                                                                          if c.startswith("level "))}}
        meta = {"policy_steps": resolver.stats["llm_calls"], "policy_fallbacks": resolver.stats["llm_fallbacks"]}
        return Answer(resolved, rounds=0, metadata=meta, review=review)
