"""`scripted:<file>`: a model whose outputs are read from a YAML file, by question. For end-to-end
tests of the pipeline only (the fact-call loop, metrics, MLflow): no language model is involved, and
runs with it are tagged `dkilab.scripted` in MLflow and kept out of `dkilab report` comparisons
unless asked for.

    answers:
      - match: "cat called"           # a substring of the question (the prompt's user message)
        outputs:                       # one per generation round of that question
          - 'retrieve_fact(trace_id="{trace_id:0}", offset=0, limit=2)'
          - 'retrieve_fact(trace_id="{trace_id:0}", offset=2, limit=2)'
          - "Your cat is called Pixel."
    default: "I don't know."          # questions no entry matches (slots filled too)

An output is cut at `max_new_tokens` (by the offline token estimate), as a server would cut it.
`{trace_id:N}` is the N-th trace id the prompt shows (`trace_id="..."`), so a script works whatever
ids a store gives. The round is the number of fact segments already in the prompt (text protocol)
or of tool results among the messages (native protocol); past the last output the last one repeats.
"""
from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dkilab.config import ConfigError, describe_errors, read_yaml
from dkilab.models.oracle import SPEC, OracleModel
from dkilab.models.specs import MODELS
from dkilab.models.text_only import TextOnlyModel
from dkilab.tracing import traced_generation
from dkilab.types import Generation

_TRACE = re.compile(r'trace_id="([^"]+)"')
_SLOT = re.compile(r"\{trace_id:(\d+)\}")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    match: str = Field(min_length=1)
    outputs: list[str] = Field(min_length=1)


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answers: list[_Entry] = Field(default_factory=list)
    default: str = ""


class ScriptedModel(TextOnlyModel):
    def __init__(self, path: str | Path, max_context: int | None = None, concurrency: int = 1):
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise ConfigError(f"scripted model: {self.path} does not exist")
        try:
            self.script = _Script.model_validate(read_yaml(self.path) or {})
        except Exception as e:  # yaml or validation: name the file and the key
            detail = describe_errors(e) if isinstance(e, ValidationError) else str(e)
            raise ConfigError(f"scripted model {self.path}: {detail}") from e
        super().__init__(f"scripted:{self.path.name}", max_context)
        self.concurrency = concurrency  # questions the runner answers at once (as with an endpoint)

    def __repr__(self) -> str:
        return f"ScriptedModel({str(self.path)!r})"

    def output_for(self, messages_or_prompt) -> str:
        msgs = ([{"role": "user", "content": messages_or_prompt}] if isinstance(messages_or_prompt, str)
                else messages_or_prompt)
        user = next((m["content"] for m in msgs if m["role"] == "user"), "")
        entry = next((e for e in self.script.answers if e.match in user), None)
        if entry is None:
            out = self.script.default
        else:
            rounds = user.count("[FACT_SEGMENT") + sum(m["role"] == "tool" for m in msgs)
            out = entry.outputs[min(rounds, len(entry.outputs) - 1)]
        shown = _TRACE.findall(user)

        def slot(m: re.Match) -> str:
            n = int(m.group(1))
            return shown[n] if n < len(shown) else f"<no trace id #{n} in the prompt>"
        return _SLOT.sub(slot, out)

    @traced_generation
    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation:
        self.refuse_memories(memories)
        prompt = self.render(messages_or_prompt, tools)
        text = self.truncate(self.output_for(messages_or_prompt), max_new_tokens)  # cut where a server stops
        return Generation(text, self.count_tokens(prompt), self.count_tokens(text))


@MODELS.register("scripted")
def _load_scripted(spec: str, *, max_context: int | None = None, concurrency: int = 1, **_):
    if spec == SPEC:
        return OracleModel(max_context=max_context)

    return ScriptedModel(spec[len("scripted:"):], max_context=max_context, concurrency=concurrency)
