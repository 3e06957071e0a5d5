"""Prompt text the harness itself adds to what a strategy is asked (strategies keep theirs in their own
files and list them in `Strategy.prompts`). Every text here that a cell can reach is in its identity
(`Cell.harness_prompts`), so editing one runs the cells it affects again."""

# a multiple-choice question (MemDaily) reaches the strategy with its lettered options and this line
CHOOSE = {"cn": "请只回答一个选项的字母。", "en": "Answer with the letter of one option."}
