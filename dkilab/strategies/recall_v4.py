"""recall_v4 (seed recall-v4-suffix-assembly): preferences as K/V (unchanged from stable), history by
multi-signal recall -> per-message summaries with trace ids inside the budget -> model-specific
formatter -> generate -> retrieve_fact loop.

Fallbacks of seed §9: `recall.strategy: flat_history` is stable's fixed recent turns, flat;
`recall.fact_call.enabled: false` (or `max_rounds: 0`) keeps the summaries but never offers or
follows a fact call. `recall.summary.strategy` picks the summariser (extractive | llm).
"""
from __future__ import annotations

import weakref

from pydantic import Field

from dkilab.recall import FactRetriever, SuffixBuilder, compute_context_budget, create_formatter, run_fact_loop
from dkilab.recall.tool_calls import template_supports_tools
from dkilab.strategies.base import RecallingStrategy, RecallParams, language_of, register
from dkilab.tracing import span
from dkilab.types import Answer


class RecallV4Params(RecallParams):
    preference_alpha: float = Field(0.4, ge=0.0)
    context_budget: int | None = Field(None, ge=0)  # cap on the history budget of §2.3


@register
class RecallV4(RecallingStrategy):
    name = "recall_v4"
    Params = RecallV4Params
    uses_kv = True

    def needs_kv(self, preferences: bool = True) -> bool:
        return preferences  # only the preferences go in as K/V

    def __init__(self, params=None, source: str = "<params>"):
        super().__init__(params, source)
        # model -> {language: builder}, held weakly by the model object (see Strategy.memory_kv)
        self._builders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _formatter(self, model_name: str, lang: str, protocol: str = "text"):
        cfg = self.params.recall
        kind = "native" if protocol == "native" else cfg.prompt_formatter
        return create_formatter(model_name, lang, kind=kind, default_limit=cfg.fact_call.batch_size)

    def protocol(self, model) -> str:
        """How retrieve_fact is offered to `model`: native (a tool in its chat template) or text."""
        chosen = self.params.recall.fact_call.protocol
        if chosen != "auto":
            return chosen
        tok = getattr(model, "tokenizer", None)
        return "native" if tok is not None and template_supports_tools(tok) else "text"

    def prompts(self, model_name: str = "") -> dict[str, str]:
        out = super().prompts(model_name) | {"fact_call.protocol": self.params.recall.fact_call.protocol}
        protocols = {"auto": ("text", "native"), "text": ("text",), "native": ("native",)}
        for protocol in protocols[self.params.recall.fact_call.protocol]:
            tag = "" if protocol == "text" else "native."
            for lang in ("en", "cn"):
                out |= {f"formatter.{tag}{k}.{lang}": v
                        for k, v in self._formatter(model_name, lang, protocol).templates().items()}
        return out

    def _builder(self, model, lang: str) -> SuffixBuilder:
        builders = self._builders.setdefault(model, {})  # summaries inside are keyed by text: users can share it
        if lang not in builders:
            cfg = self.params.recall
            formatter = self._formatter(model.name, lang, self.protocol(model))
            if cfg.summary.strategy == "llm":
                from dkilab.text.summarize import LLMSummarizer

                summarizer = LLMSummarizer(lambda prompt, max_new_tokens=150: model.generate(
                    [{"role": "user", "content": prompt}], max_new_tokens=max_new_tokens), model)
            else:
                from dkilab.text.summarize import ExtractiveSummarizer

                summarizer = ExtractiveSummarizer(model)
            builders[lang] = SuffixBuilder(cfg, formatter, summarizer, model)
        return builders[lang]

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        lang, p, cfg = language_of(question), self.params, self.params.recall
        with stages("recall", question=question) as trace:
            if cfg.strategy == "flat_history" or not cfg.enabled:
                turns = cfg.budget.max_recent_turns if cfg.enabled else 0
                recalled = memory.recent(2 * turns, session_id=session_id) if turns else []
            else:
                recalled = self.recall_messages(question, memory, session_id)
            trace["recalled_ids"] = [m.message_id for m in recalled]
        with stages("assembly") as trace:
            memories, pref = self.preference_memories(model, preferences, lang, p.preference_alpha)
            builder = self._builder(model, lang)
            budget = compute_context_budget(self.window(model), cfg, model.count_tokens(question),
                                            model.count_tokens(pref) if pref else 0, p.max_new_tokens, p.context_budget)
            suffix = builder.build(question, recalled, budget.history, language=lang)
            trace.update(suffix=suffix.text, budget=budget.as_dict(), summaries=suffix.summary_count)
        formatter = builder.formatter
        native = formatter.name == "native"
        tools = [formatter.tool] if native else None
        gens = []

        def generate(text: str, turns: list | None = None) -> str:
            with stages("generation", round=len(gens)) as trace:
                gen, prompt = self.generate(model, text, lang, memories=memories,
                                            system_extra=formatter.system_prompt(lang), tools=tools, turns=turns)
                trace["output"] = gen.text
            gens.append((gen, prompt))
            return gen.text

        facts: list[str] = []

        def on_call(call, text: str) -> None:
            with span("retrieve_fact", trace_id=call.trace_id, offset=call.offset, limit=call.limit) as out:
                out.update(valid=call.valid, found=call.found, tokens=call.tokens, fact=text)
            facts.append(text)

        retriever = FactRetriever(memory, model, max_fact_tokens=cfg.fact_call.max_fact_tokens,
                                  chunk_threshold=cfg.summary.per_message_threshold)
        loop = run_fact_loop(suffix.text, generate, formatter, retriever, cfg, session_id=session_id,
                             offered=suffix.trace_ids, token_counter=model,
                             on_call=on_call, native=native)
        gen, prompt = gens[-1]
        return Answer(loop.output, prompt_tokens=gen.prompt_tokens, injected_tokens=gen.injected_tokens,
                      generated_tokens=sum(g.new_tokens for g, _ in gens), recalled_ids=list(suffix.trace_ids),
                      fact_calls=loop.fact_calls, rounds=loop.rounds,
                      context_text="\n".join([pref, suffix.text, *facts]), prompt=prompt, budget=budget,
                      metadata={"summaries": suffix.summary_count, "history_tokens": suffix.history_tokens,
                                "dropped_for_budget": suffix.dropped_for_budget, "fact_loop_stopped": loop.stopped,
                                "fact_protocol": "native" if native else "text",
                                "fact_tokens": loop.fact_tokens, "facts": facts})  # what each call fetched
