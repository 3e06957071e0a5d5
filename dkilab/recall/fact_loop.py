"""The inference + fact-call loop (seed recall-v4 §2.5).

Only the model's output is parsed for calls: facts and stored messages appended to the prompt are
never executed, whatever text they hold. Retrieval is scoped to the trace ids the suffix offered (seed
§3.3): another id gets a not-found segment and counts as invalid. Unlike the seed's sketch, a loop that
spends its rounds or its fact budget, or writes a call that cannot be parsed, ends with one more generation
that keeps the facts gathered and is told to answer now (text protocol: `FINAL` in the prompt's language;
native: no tools offered). An output that is still a call is a `final_call`: no answer, never an abstention.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

from dkilab.recall.config import RecallConfig
from dkilab.recall.fact_retriever import FactRetriever
from dkilab.recall.formatters import PromptFormatter
from dkilab.text.tokens import HeuristicTokenCounter, TokenCounter
from dkilab.types import FactCall, FactResponse


@dataclass
class FactLoopResult:
    output: str
    fact_calls: list[FactCall] = field(default_factory=list)
    rounds: int = 0  # generations run
    prompt: str = ""  # the final prompt, facts included
    fact_tokens: int = 0
    stopped: str = "answered"  # answered | max_rounds | max_fact_tokens | malformed | disabled
    turns: list[dict] = field(default_factory=list)  # native protocol: assistant tool calls + tool results
    final_call: bool = False  # the forced last generation was still a call (recorded as no answer)


def run_fact_loop(prompt: str, generate: Callable[..., str], formatter: PromptFormatter, retriever: FactRetriever,
                  config: RecallConfig, *, session_id: str | None = None, offered: list[str] | None = None,
                  token_counter: TokenCounter | None = None, on_call: Callable[[FactCall, str], None] | None = None,
                  native: bool = False) -> FactLoopResult:
    """Generate; while the output asks for retrieve_fact, append the fact segment and generate again.

    `generate(prompt) -> str`; `offered` = trace ids shown to the model (a call outside them gets a
    not-found segment and is counted invalid). With `native` (the model's chat template offers
    retrieve_fact as a tool), the call and its fact segment become an assistant `tool_calls` message and
    a `tool` message, and `generate(prompt, turns, tools)` is called with those turns so the template
    renders them in the model's own format (`tools` False for the forced last generation).
    """
    counter = token_counter or HeuristicTokenCounter()
    shared, formatter = formatter, copy.copy(formatter)  # its malformed count is this question's alone
    formatter.malformed_calls = 0
    fc = config.fact_call
    result = FactLoopResult(output="", prompt=prompt)
    offered_set = set(offered) if offered is not None else None
    enabled = config.fact_calls_active  # max_rounds: 0 follows no call at all
    def gen(final: bool = False) -> str:
        if native:
            return generate(result.prompt, list(result.turns), not final)
        return generate(result.prompt + ("\n" + formatter.final_instruction() if final else ""))

    for round_idx in range(fc.max_rounds if enabled else 1):
        result.output = gen()
        result.rounds += 1
        if not enabled:
            result.stopped = "disabled"
            return result
        before = formatter.malformed_calls
        request = formatter.detect_fact_request(result.output)
        if request is None:
            if formatter.malformed_calls == before:
                result.stopped = "answered"
                return result
            shared.malformed_calls += 1  # a call that cannot be parsed is no answer either: told to answer now
            result.fact_calls.append(FactCall(None, 0, 0, valid=False, malformed=True, round=round_idx))
            result.stopped = "malformed"
            break
        if offered_set is not None and request.trace_id not in offered_set:
            response = FactResponse([], request.trace_id, 0, request.offset, False, found=False)
        else:
            response = retriever.retrieve(request.trace_id, session_id=session_id, offset=request.offset,
                                          limit=request.limit)
        fact_text = formatter.format_fact_segment(response)
        tokens = counter.count_tokens(fact_text)
        # a page whose records fit the retriever's content budget can be over the room once formatted (each record
        # gets its header): fewer records, so the model reads a page and may ask for the next, never nothing
        while result.fact_tokens + tokens > fc.max_fact_tokens and len(response.messages) > 1:
            response = retriever.retrieve(request.trace_id, session_id=session_id, offset=request.offset,
                                          limit=len(response.messages) // 2)
            fact_text = formatter.format_fact_segment(response)
            tokens = counter.count_tokens(fact_text)
        call = FactCall(request.trace_id, request.offset, request.limit, tokens=tokens, found=response.found,
                        valid=response.found and (offered_set is None or request.trace_id in offered_set),
                        round=round_idx)
        result.fact_calls.append(call)
        call.kept = result.fact_tokens + tokens <= fc.max_fact_tokens
        if on_call is not None:
            on_call(call, fact_text)
        if not call.kept:  # dropped: the model never reads it
            result.stopped = "max_fact_tokens"
            break
        result.fact_tokens += tokens
        if native:
            args = {"trace_id": request.trace_id, "offset": request.offset, "limit": request.limit}
            call_id = f"call_{round_idx}"
            result.turns += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "retrieve_fact", "arguments": args}}]},
                {"role": "tool", "tool_call_id": call_id, "name": "retrieve_fact", "content": fact_text}]
        else:
            result.prompt = result.prompt + "\n" + fact_text + "\n" + formatter.follow_up()
    else:
        result.stopped = "max_rounds"
    # the rounds (or the fact budget) are spent: one last generation must answer from what it has
    result.output = gen(final=True)
    result.rounds += 1
    before = formatter.malformed_calls
    result.final_call = formatter.detect_fact_request(result.output) is not None or formatter.malformed_calls > before
    return result
