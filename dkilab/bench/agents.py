"""Agent benchmark: the rule-policy recall agent's latency per question on LoCoMo users (~600 messages
each; a synthetic user of the same size without a data dir) and pointer resolution with the rule
composer on the agent-tree scenarios. No tracing, warm process, query-embedding cache emptied first.

    dkilab bench agents [--data-dir DIR] [--questions 200] [--repeat 20]
"""
from __future__ import annotations

import statistics
import time
from datetime import timedelta

from dkilab.agents.recall_agent import RecallAgent
from dkilab.agents.recall_agent.conflict_set import PERSONAS, evaluate
from dkilab.eval.data import load_dataset
from dkilab.eval.data.agents import load_agent_pointers, load_agent_pointers_heldout, load_agent_recall
from dkilab.eval.harness.stores import store_for
from dkilab.eval.scoring.base import percentile
from dkilab.strategies.semantic_pointer import SemanticPointerStrategy
from dkilab.types import Conversation


def _locomo_like(data_dir):
    """(store, [(user view, question, asked_at)], label): LoCoMo questions, or a synthetic LoCoMo-sized user."""
    try:
        convs = load_dataset("locomo", data_dir=data_dir)
        per_user = sum(len(c.messages) for c in convs) // len(convs)
        label = f"LoCoMo ({len(convs)} users, {per_user} messages each on average)"
    except FileNotFoundError:
        base = load_agent_recall()
        msgs = []
        for rep in range(100):  # ~600 messages: every scenario's chat, shifted by a week per repetition
            for c in base:
                for m in c.messages:
                    msgs.append(type(m)(f"syn{rep}:{m.message_id}", "synthetic", f"syn{rep}:{m.session_id}", m.turn_id,
                                        m.role, m.content, m.timestamp + timedelta(days=7 * rep)))
                if len(msgs) >= 600:
                    break
            if len(msgs) >= 600:
                break
        qs = [q for c in base for q in c.questions]
        convs = [Conversation("synthetic", "synthetic", msgs, qs)]
        label = f"synthetic user ({len(msgs)} messages; no LoCoMo in the data dir)"
    store = store_for(convs, "bench-agents")
    items = [(store.for_user(c.user_id), q.question, q.question_date) for c in convs for q in c.questions]
    return store, items, label


def recall_agent_figures(data_dir=None, questions: int = 200) -> dict:
    store, items, label = _locomo_like(data_dir)
    step = max(1, len(items) // questions)
    items = items[::step][:questions]
    store.embedder.clear_cache()
    for q in ("warm up: what do I like?", "我喜欢吃什么？"):  # loads the encoder and jieba's dictionary
        RecallAgent(items[0][0]).recall(q, now=items[0][2])
    ms, calls = [], []
    for view, q, asked in items:
        t = time.perf_counter()
        res = RecallAgent(view).recall(q, now=asked)
        ms.append((time.perf_counter() - t) * 1000)
        calls.append(res.tool_calls)
    return {"label": label, "n": len(ms), "p50": percentile(ms, 50), "p95": percentile(ms, 95),
            "calls": statistics.mean(calls)}


def pointer_figures(repeat: int = 20) -> dict:
    convs = load_agent_pointers() + load_agent_pointers_heldout()
    store = store_for(convs, "bench-agent-pointers")
    strategy = SemanticPointerStrategy()
    ms = []
    for _ in range(repeat):
        for c in convs:
            q = c.questions[0]
            t = time.perf_counter()  # a fresh resolver per case: nothing is cached
            strategy.answer(q.question, store.for_user(c.user_id), None, task=q.task)
            ms.append((time.perf_counter() - t) * 1000)
    return {"n": len(ms), "cases": len(convs), "p50": percentile(ms, 50), "p95": percentile(ms, 95)}


def main(data_dir=None, questions: int = 200, repeat: int = 20) -> int:
    c = evaluate()
    print(f"recall agent adjudication, conflict set ({c['pairs']} pairs, zh+en; "
          "dkilab/agents/recall_agent/conflicts.yaml):")
    print(f"  accuracy {c['accuracy']:.3f} (zh {c['accuracy_cn']:.3f}, en {c['accuracy_en']:.3f}); explicit "
          f"constraints kept against a weaker later statement: {c['constraints_kept']:.3f}")
    for case, got in c["failures"].items():
        print(f"  failed: {case} ({got})")
    for persona in PERSONAS:  # the LLM policy's view stands as the model writes it: a persona scores its own rule
        p = evaluate(persona=persona)
        print(f"  LLM policy, scripted persona {persona}: accuracy {p['accuracy']:.3f}, constraints kept "
              f"{p['constraints_kept']:.3f}")
    r = recall_agent_figures(data_dir, questions)
    print(f"recall agent, rule policy, {r['label']}:")
    print(f"  {r['n']} questions: p50 {r['p50']:.1f} ms, p95 {r['p95']:.1f} ms, {r['calls']:.2f} tool calls per "
          "question")
    p = pointer_figures(repeat)
    print(f"semantic pointers, rule composer, {p['cases']} agent trees x {repeat}:")
    print(f"  {p['n']} resolutions: p50 {p['p50']:.2f} ms, p95 {p['p95']:.2f} ms")
    return 0
