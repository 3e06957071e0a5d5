"""Issue 31 item 4: every prompt text lives in dkilab/prompts.py, and a cell's hash covers every text it can
reach. The test edits each text in turn (every language, every entry) and checks that the config hash of a
cell that sends it changes. A new prompt in dkilab/prompts.py must be added to REACH, or the first test fails."""
import pytest
from dkilab import prompts
from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

from tests.conftest import ROOT

FIXTURES = {"name": "fixtures", "question_limit": 1}
GENERATES = {"strategies": [{"name": "full_history"}], "datasets": [FIXTURES]}
RECALL_V4 = {"strategies": [{"name": "recall_v4"}], "datasets": [FIXTURES]}
REACH = {  # prompt -> an experiment whose (first) cell sends it
    "ABSTAIN_PHRASE": GENERATES,  # written into SYSTEM when the module loads: see DERIVED
    "CHOOSE": {"strategies": [{"name": "no_memory"}], "datasets": [{"name": "scripted",
                                                                    "path": "tests/data/scripted/dialogues.json"}]},
    "SYSTEM": GENERATES, "HISTORY_HEAD": GENERATES, "QUESTION": GENERATES,
    "PREFERENCES_HEAD": {"strategies": [{"name": "stable"}], "datasets": [FIXTURES]},
    "RETRIEVE_FACT_TOOL": {"strategies": [{"name": "recall_v4",
                                           "params": {"recall": {"fact_call": {"protocol": "native"}}}}],
                           "datasets": [FIXTURES]},
    "NATIVE_CALL": {"strategies": [{"name": "recall_v4", "params": {"recall": {"fact_call": {"protocol": "native"}}}}],
                    "datasets": [FIXTURES]},
    "DEEPSEEK_TOOLS": {"strategies": [{"name": "recall_v4", "params": {"recall": {"prompt_formatter": "deepseek"}}}],
                       "datasets": [FIXTURES]},
    "CONSTRAINT": RECALL_V4, "QUERY": RECALL_V4, "FOLLOW_UP": RECALL_V4, "FINAL": RECALL_V4, "NOT_FOUND": RECALL_V4,
    "LLM_SUMMARY_PROMPT": {"strategies": [{"name": "recall_v4",
                                           "params": {"recall": {"summary": {"strategy": "llm"}}}}],
                           "datasets": [FIXTURES]},
    "VIEW_HEAD": {"strategies": [{"name": "recall_agent"}], "datasets": [{"name": "agent_recall"}]},
    "VIEW_KIND": {"strategies": [{"name": "recall_agent"}], "datasets": [{"name": "agent_recall"}]},
    "VIEW_UNCERTAIN": {"strategies": [{"name": "recall_agent"}], "datasets": [{"name": "agent_recall"}]},
    "AGENT_PLAN": {"strategies": [{"name": "recall_agent", "params": {"policy": "llm"}}],
                   "datasets": [{"name": "agent_recall"}]},
    "AGENT_SYNTH": {"strategies": [{"name": "recall_agent", "params": {"policy": "llm"}}],
                    "datasets": [{"name": "agent_recall"}]},
    "POINTER_DETECT_PROMPT": {"strategies": [{"name": "semantic_pointer", "params": {"policy": "llm"}}],
                              "datasets": [{"name": "agent_pointers"}]},
    "POINTER_SYNTH_PROMPT": {"strategies": [{"name": "semantic_pointer", "params": {"policy": "llm"}}],
                             "datasets": [{"name": "agent_pointers"}]},
    "FLOW_ANSWER": {"strategies": [{"name": "session_l2"}], "datasets": [{"name": "session_flow"}]},
    "REWRITE_PROMPT": {"strategies": [{"name": "session_l2"}], "datasets": [{"name": "session_flow"}]},
    "INTENT_PROMPT": {"strategies": [{"name": "session_l2"}], "datasets": [{"name": "session_flow"}]},
    "JUDGE_PROMPT": {"strategies": [{"name": "no_memory"}], "datasets": [FIXTURES],
                     "judge": {"model": "offline:smollm2"}},
    "ABSTENTION_PROMPT": {"strategies": [{"name": "no_memory"}], "datasets": [FIXTURES],
                          "judge": {"model": "offline:smollm2", "abstention": True}},
}
DERIVED = {"ABSTAIN_PHRASE": "SYSTEM"}  # texts built into another prompt when dkilab/prompts.py loads
TEXTS = sorted(n for n in vars(prompts) if n.isupper())


def _leaves(value, path=()):
    """(path, text) of every string inside a prompt (dicts by language, nested tables, tuples of lines)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))


def _edited(value, path, new):
    """`value` with the text at `path` replaced (tuples rebuilt, dicts and lists edited in place)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, tuple):
        return tuple(_edited(v, rest, new) if i == head else v for i, v in enumerate(value))
    value[head] = _edited(value[head], rest, new)
    return value


def _hash(name: str) -> str:
    budget = {"defaults": {"history_budget": 512}}  # recall_v4's fact room fits beside it in the window
    return expand_cells(experiment_from_dict({"name": "p", **budget, **REACH[name]}, "<test>"))[0].config_hash


def test_every_prompt_text_has_a_cell_that_sends_it():
    assert TEXTS and sorted(REACH) == TEXTS


@pytest.mark.parametrize("name", TEXTS)
def test_editing_each_prompt_text_changes_the_hash_of_the_cells_that_send_it(name, monkeypatch):
    import copy

    monkeypatch.chdir(ROOT)  # the scripted file path
    if name in DERIVED:  # an edit of the file changes the prompt it is built into, which is hashed
        inside = " ".join(t for _, t in _leaves(getattr(prompts, DERIVED[name])))
        assert all(t in inside for _, t in _leaves(getattr(prompts, name)))
        return
    before = _hash(name)
    original = getattr(prompts, name)
    leaves = list(_leaves(original))
    assert leaves, name
    for path, text in leaves:
        edited = _edited(copy.deepcopy(original), path, text + " (edited)")
        monkeypatch.setattr(prompts, name, edited)
        _patch_consumers(monkeypatch, name, original, edited)
        assert _hash(name) != before, f"editing {name}{list(path)} left the hash of the cells that send it unchanged"
        monkeypatch.setattr(prompts, name, original)
        _patch_consumers(monkeypatch, name, edited, original)
    assert _hash(name) == before


def _patch_consumers(monkeypatch, name, old, new):
    """Modules that imported the object itself (dict tables): point them at the edited copy too."""
    import sys

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("dkilab.") and mod is not prompts:
            for attr, value in list(vars(mod).items()):
                if value is old and attr.isupper():
                    monkeypatch.setattr(mod, attr, new)


def test_no_prompt_text_holds_a_linter_comment():
    """A line-length wrap once put `# noqa: E501` inside the judge's prompt (every judged cell sent it)."""
    def texts(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from texts(v)

    found = [name for name in TEXTS for text in texts(getattr(prompts, name))
             if "noqa" in text or "type: ignore" in text]
    assert not found
