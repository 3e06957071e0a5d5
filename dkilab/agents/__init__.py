"""Agents over the memory store: the recall agent (seed recall-agent.md), which answers "what do we know
about this user?" with a memory view backed by verbatim evidence, and semantic pointers (seed
semantic-pointer.md), which turn vague parameter descriptions in agent trees into self-contained ones.

Both run without an LLM (rule policies) and with one (LLM policies that fall back to the rules on
malformed output). Import the subpackages: `dkilab.agents.recall_agent`, `dkilab.agents.semantic_pointer`.
"""
