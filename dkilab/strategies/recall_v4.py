"""recall_v4 (seed recall-v4-suffix-assembly): preferences as K/V (unchanged from stable), history by
multi-signal recall -> per-message summaries with trace ids inside the budget -> model-specific
formatter -> generate -> retrieve_fact loop.

The history budget is the one every strategy gets (`history_budget`): the items shown fill it. The room
the fact loop may append and the constraint instruction are kept free in the window beside it
(`ContextBudget.room`), or taken from it with the seed's §2.3 accounting
(`recall.budget.reserve_from_history`, `ContextBudget.reserved`). History items carry
the same time and speaker as every other strategy's lines (`history_fields`), summaries and fact
segments included.

Fallbacks of seed §9: `recall.strategy: flat_history` is exactly stable (its recent turns, newest kept
when the budget binds, the same prompt); `recall.fact_call.enabled: false` (or `max_rounds: 0`) keeps
the summaries but never offers or follows a fact call. `recall.summary.strategy` picks the summariser.
`prompt_formatter` chosen explicitly wins over `fact_call.protocol: auto`.
"""
from __future__ import annotations

import weakref
from typing import Any

from pydantic import Field

from dkilab import tracing
from dkilab.models.tool_calls import template_supports_tools
from dkilab.recall import FactRetriever, SuffixBuilder, create_formatter, fact_call_reserve, run_fact_loop
from dkilab.strategies.base import (
    RecallingStrategy,
    RecallParams,
    history_block,
    language_of,
    newest_that_fit,
    question_text,
    register,
)
from dkilab.text.summarize import LLM_SUMMARY_PROMPT, ExtractiveSummarizer, LLMSummarizer
from dkilab.tracing import span
from dkilab.types import Answer, TokenizedModel


class RecallV4Params(RecallParams):
    preference_alpha: float = Field(0.4, ge=0.0)


@register
class RecallV4(RecallingStrategy):
    name = "recall_v4"
    # 3: context_text without the query; 4: the fact room beside the history budget, not taken from it;
    # 5: a fact dropped for the fact budget is not context (it never reached a prompt)
    version = "5"
    Params = RecallV4Params
    params: RecallV4Params
    uses_kv = True

    def needs_kv(self, preferences: bool = True) -> bool:
        return preferences  # only the preferences go in as K/V

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        # model -> {language: builder}, held weakly by the model object (see Strategy.memory_kv)
        self._builders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def generates_in_assembly(self) -> bool:
        cfg = self.params.recall
        return cfg.enabled and cfg.strategy == "summary_with_fact_call" and cfg.summary.strategy == "llm"

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        out = super(RecallingStrategy, self).inert_params(has_preferences, generate)
        cfg = self.params.recall
        if not cfg.enabled or cfg.strategy == "flat_history":
            why = ("recall.enabled is false" if not cfg.enabled else "recall.strategy is flat_history") + \
                  ": no recall, summaries or fact calls"
            for key in ("recall.signals", "recall.summary", "recall.fact_call", "recall.prompt_formatter",
                        "recall.budget", "recall.default_recall_turns", "reference", "max_results"):
                out[key] = why
            if cfg.enabled:
                out.pop("recall.budget")
                for key in ("min_recent_turns", "generation_reserve", "instruction_reserve", "reserve_from_history"):
                    out[f"recall.budget.{key}"] = why  # max_recent_turns is the number of flat turns
        elif not cfg.fact_call.active:
            why = ("recall.fact_call.enabled is false" if not cfg.fact_call.enabled else
                   "recall.fact_call.max_rounds is 0") + ": no call is offered or followed"
            for key in ("max_fact_tokens", "batch_size", "protocol"):
                out[f"recall.fact_call.{key}"] = why
            out["recall.fact_call.max_rounds" if not cfg.fact_call.enabled else "recall.fact_call.enabled"] = why
            out["recall.prompt_formatter"] = why + " (formatters differ only in the call syntax)"
            for key in ("generation_reserve", "instruction_reserve", "reserve_from_history"):
                out[f"recall.budget.{key}"] = why
        return out

    def budget_parts(self) -> tuple[dict[str, int], dict[str, int]]:
        cfg = self.params.recall
        if not cfg.enabled or cfg.strategy == "flat_history":
            return {}, {}
        parts = fact_call_reserve(cfg, self.params.max_new_tokens)
        return ({}, parts) if cfg.budget.reserve_from_history else (parts, {})

    def _formatter(self, model_name: str, lang: str, protocol: str = "text"):
        cfg = self.params.recall
        kind = "native" if protocol == "native" else cfg.prompt_formatter
        return create_formatter(model_name, lang, kind=kind, default_limit=cfg.fact_call.batch_size,
                                fields=self.fields)

    def protocol(self, model) -> str:
        """How retrieve_fact is offered to `model`: native (a tool in its chat template) or text. `auto`
        chooses native only where nothing else was chosen: an explicit `prompt_formatter` (generic,
        deepseek, glm) is the seed's text protocol in that formatter's syntax, and it wins."""
        chosen = self.params.recall.fact_call.protocol
        if chosen != "auto":
            return chosen
        if self.params.recall.prompt_formatter != "auto":
            return "text"
        tok = model.tokenizer if isinstance(model, TokenizedModel) else None
        return "native" if tok is not None and template_supports_tools(tok) else "text"

    def prompts(self, model_name: str = "") -> dict[str, str]:
        out = super().prompts(model_name) | {"fact_call.protocol": self.params.recall.fact_call.protocol}
        protocols = {"auto": ("text", "native"), "text": ("text",), "native": ("native",)}
        if self.params.recall.prompt_formatter != "auto":
            protocols["auto"] = ("text",)
        for protocol in protocols[self.params.recall.fact_call.protocol]:
            tag = "" if protocol == "text" else "native."
            for lang in ("en", "cn"):
                out |= {f"formatter.{tag}{k}.{lang}": v
                        for k, v in self._formatter(model_name, lang, protocol).templates().items()}
        if self.params.recall.summary.strategy == "llm":
            out |= {f"summary.llm.{lang}": text for lang, text in LLM_SUMMARY_PROMPT.items()}
        return out

    def _builder(self, model, lang: str) -> SuffixBuilder:
        builders = self._builders.setdefault(model, {})  # summaries inside are keyed by text: users can share it
        if lang not in builders:
            cfg = self.params.recall
            formatter = self._formatter(model.name, lang, self.protocol(model))
            summarizer: Any
            if cfg.summary.strategy == "llm":
                summarizer = LLMSummarizer(lambda prompt, max_new_tokens=150: model.generate(
                    [{"role": "user", "content": prompt}], max_new_tokens=max_new_tokens), model)
            else:
                summarizer = ExtractiveSummarizer(model)
            builders[lang] = SuffixBuilder(cfg, formatter, summarizer, model)
        return builders[lang]

    def _flat(self, question, memory, model, session_id, preferences, stages):
        """Seed §9's full fallback: stable's recent turns and prompt, unchanged."""
        lang, cfg = language_of(question), self.params.recall
        with stages("recall"):
            turns = cfg.budget.max_recent_turns if cfg.enabled else 0
            recent = memory.recent(2 * turns, session_id=session_id) if turns else []
            tracing.record(documents=tracing.documents(recent))
        with stages("assembly"):
            memories, pref = self.preference_memories(model, preferences, lang, self.params.preference_alpha)
            budget = self.budget(model, question, lang, pref)
            recent, budget.used = newest_that_fit(recent, model, budget.history, lang, self.fields)
            history = history_block(recent, lang, self.fields)
        with stages("generation"):
            gen, prompt = self.generate(model, question_text(question, lang, history), lang, memories=memories)
        return Answer(gen.text, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=gen.new_tokens, recalled_ids=[m.message_id for m in recent],
                      context_text="\n".join(x for x in (pref, history) if x), prompt=prompt, budget=budget,
                      metadata={"recall_strategy": "flat_history"})

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        lang, p, cfg = language_of(question), self.params, self.params.recall
        if cfg.strategy == "flat_history" or not cfg.enabled:
            return self._flat(question, memory, model, session_id, preferences, stages)
        with stages("recall", question=question) as trace:
            recalled = self.recall_messages(question, memory, session_id, asked_at)
            trace["recalled_ids"] = [m.message_id for m in recalled]
        with stages("assembly") as trace:
            memories, pref = self.preference_memories(model, preferences, lang, p.preference_alpha)
            builder = self._builder(model, lang)
            room, reserved = self.budget_parts()
            budget = self.budget(model, question, lang, pref, reserved=reserved, room=room)
            suffix = builder.build(question, recalled, budget.history, language=lang)
            budget.used = suffix.history_tokens
            trace.update(suffix=suffix.text, budget=budget.as_dict(), summaries=suffix.summary_count)
        formatter = builder.formatter
        native = formatter.name == "native"
        tools = [formatter.tool] if native else None
        gens = []

        def generate(text: str, turns: list | None = None, offer_tools: bool = True) -> str:
            with stages("generation", round=len(gens)) as trace:
                gen, prompt = self.generate(model, text, lang, memories=memories,
                                            system_extra=formatter.system_prompt(lang),
                                            tools=tools if offer_tools else None, turns=turns)
                trace["output"] = gen.text
            gens.append((gen, prompt))
            return gen.text

        facts: list[str] = []

        def on_call(call, text: str) -> None:
            with span("retrieve_fact", trace_id=call.trace_id, offset=call.offset, limit=call.limit) as out:
                out.update(valid=call.valid, found=call.found, tokens=call.tokens, fact=text, kept=call.kept)
            if call.kept:  # a segment dropped for the fact budget never reached a prompt: not context
                facts.append(text)

        retriever = FactRetriever(memory, model, max_fact_tokens=cfg.fact_call.max_fact_tokens,
                                  chunk_threshold=cfg.summary.per_message_threshold)
        loop = run_fact_loop(suffix.text, generate, formatter, retriever, cfg, session_id=session_id,
                             offered=suffix.trace_ids, token_counter=model,
                             on_call=on_call, native=native)
        gen, prompt = gens[-1]
        final = {"final_call": True, "final_output": loop.output} if loop.final_call else {}
        return Answer("" if loop.final_call else loop.output, prompt_tokens=gen.prompt_tokens,
                      injected_tokens=gen.injected_tokens, generated_tokens=sum(g.new_tokens for g, _ in gens),
                      recalled_ids=list(suffix.trace_ids), summary_ids=[it.trace_id for it in suffix.items
                                                                        if it.type == "summary"],
                      fact_calls_offered=suffix.has_fact_call_instruction,
                      fact_calls=loop.fact_calls, rounds=loop.rounds,
                      context_text="\n".join(x for x in (pref, suffix.history_text, *facts) if x), prompt=prompt,
                      budget=budget,
                      metadata={"summaries": suffix.summary_count, "history_tokens": suffix.history_tokens,
                                "dropped_for_budget": suffix.dropped_for_budget, "fact_loop_stopped": loop.stopped,
                                "fact_tokens": loop.fact_tokens, "facts": facts,  # what each call fetched
                                "tokens_processed": sum(g.prompt_tokens + g.injected_tokens + g.new_tokens
                                                        for g, _ in gens)} | final,
                      review={"fact_protocol": "native" if native else "text", "formatter": formatter.name})
