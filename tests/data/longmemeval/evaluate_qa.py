"""A stand-in for LongMemEval's src/evaluation/evaluate_qa.py, written for dkilab's tests: its answer-check
function with the same name, arguments and branches, in other words (the official prompt text is not in this
repository). The rest of the real script calls a model; here the module body raises, to show it never runs."""


def get_anscheck_prompt(task, question, answer, response, abstention=False):
    if not abstention:
        if task in ["single-session-user", "single-session-assistant", "multi-session"]:
            template = "[basic] Q: {} Gold: {} Reply: {} Does the reply contain the gold answer? Say yes or no."
            prompt = template.format(question, answer, response)
        elif task == "temporal-reasoning":
            template = "[temporal, off by one day is fine] Q: {} Gold: {} Reply: {} Say yes or no."
            prompt = template.format(question, answer, response)
        elif task == "knowledge-update":
            template = "[update, the new value counts] Q: {} Gold: {} Reply: {} Say yes or no."
            prompt = template.format(question, answer, response)
        elif task == "single-session-preference":
            template = "[preference rubric] Q: {} Rubric: {} Reply: {} Does the reply follow it? Say yes or no."
            prompt = template.format(question, answer, response)
        else:
            raise NotImplementedError
    else:
        template = "[abstention] Q: {} Why unanswerable: {} Reply: {} Does the reply decline? Say yes or no."
        prompt = template.format(question, answer, response)
    return prompt


raise RuntimeError("the body of the evaluation script ran")
