"""imported: the answers of a published run, read from its predictions file (`dkilab import`), never generated.

A cell of this strategy is a cell like any other (stored answers, every metric by the scoring path, intervals,
paired differences, the card), but the runner reads its answers from `path` through a predictions reader
(`dkilab/eval/data/published/`: the LoCoMo audit's `eval_results.json`, plain JSONL or CSV) instead of asking a
model: no model is loaded and nothing is regenerated. The file's content digest is part of the cell's
identity, so an edited file is another cell; the same file under another path is the same generation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from dkilab import cache
from dkilab.config import under_data_dir
from dkilab.strategies.base import Strategy, StrategyParams, register
from dkilab.types import Answer


class ImportedParams(StrategyParams):
    path: str = Field(min_length=1)  # the predictions file: absolute, else under the data dir, else the cwd
    format: str = "auto"  # a predictions reader (dkilab.eval.data.published.READERS), or auto: by name and content
    answer_model: str | None = None  # who wrote the answers, where the file does not say (card, MLflow)


def file_digest(path: str | Path) -> str:
    """The sha1 of a file's bytes (`dkilab.cache.file_digest`), the file named when it cannot be read."""
    p = Path(path)
    try:
        p.stat()
    except OSError as exc:
        raise ValueError(f"imported: {p}: cannot read the predictions file ({exc.strerror})") from None
    if not p.is_file():
        raise ValueError(f"imported: {p} is not a file")
    return cache.file_digest(p)


@register
class Imported(Strategy):
    name = "imported"
    version = "1"
    Params = ImportedParams
    params: ImportedParams
    needs_model = False
    supports_context_only = False
    answers_from_file = True

    def __init__(self, params: dict[str, Any] | StrategyParams | None = None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        self.file = under_data_dir(self.params.path)
        self.sha1 = file_digest(self.file)  # a missing file is refused when the experiment is read

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        why = "an imported cell's answers are read from its file, never generated"
        return super().inert_params(has_preferences, generate) | {
            k: why for k in ("max_new_tokens", "temperature", "preferences", "max_prompt_tokens", "history_budget",
                             "history_fields")}

    def identity(self, model_name: str = "") -> dict[str, Any]:
        return {"version": self.version, "source_sha1": self.sha1}

    def prompts(self, model_name: str = "") -> dict[str, str]:
        return {}

    def _answer(self, question, memory, model, *, session_id, preferences, stages) -> Answer:
        raise RuntimeError(f"imported: the answers of this cell are read from {self.file} by the runner "
                           "(dkilab.eval.data.published); a strategy call would have generated one")
