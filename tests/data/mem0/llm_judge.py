"""A stand-in for mem0's evaluation/metrics/llm_judge.py, written for dkilab's tests: an ACCURACY_PROMPT constant
with the same placeholders, in other words (the published prompt text is not in this repository). The rest of
the real file calls a model; here the module body raises, to show it is only read."""

ACCURACY_PROMPT = """[J] Label the generated answer CORRECT or WRONG against the gold; be generous with the same topic.
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}
Return JSON with the key "label"."""

raise RuntimeError("the body of the judge script ran")
