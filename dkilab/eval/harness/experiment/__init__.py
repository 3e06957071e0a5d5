"""Experiment YAML: datasets x strategies x sweep points -> cells, each validated when the file is read
and identified by a hash of everything that decides its result.

```yaml
name: quickstart
seed: 0
model: {spec: offline:smollm2, max_context: 2048}
embedder: {model: auto}   # the stores' sentence encoder: auto = MiniLM for en, e5 for zh and mixed
defaults: {max_new_tokens: 32}            # params for every strategy that has them (nested blocks merge)
datasets: [{name: fixtures, question_limit: 8, split: full}]   # or {name: mine, path: mine.jsonl}
strategies: [{name: no_memory}, {name: recall_v4, label: v4, params: {recall: {...}}}]
sweep:                                     # grid over dotted keys
  params.preference_alpha: [0.2, 0.6]      # every strategy that has the parameter
  v4.recall.summary.per_message_threshold: [60, 200]   # one strategy (by label)
  model.max_context: [1024, 2048]
expect: {v4: {score: [0.0, 1.0]}}          # CI configs: metric ranges a run must land in (`v4@fixtures`: one dataset)
judge: {model: offline:smollm2}           # optional LLM judge -> judge_score (model and prompt logged)
```

Everything is checked at load time, before a model loads or a run starts: unknown keys anywhere
(also under `defaults:` and in sweep keys, which must fit at least one strategy), every cell's
strategy params, duplicate YAML keys. Errors are one line naming the file and the dotted key.

A cell's identity (`Cell.identity`, hashed into `config_hash`) is the validated, fully resolved
params (defaults from code included), the strategy's version and prompts, the dataset's spec,
version and scorer, the model and embedder (where the strategy uses them), the metrics' versions
and the judge: change any of them, or a default in code, and the cell runs again. The identity has two
parts: what generates the answers (`generation_hash`) and what scores them (`scoring_hash`: metrics,
detector, scorer, judge). When only the scoring part changed, `dkilab run` re-scores the stored answers
of the earlier run instead of generating them again (dkilab.eval.harness.rescore).

One module per idea: `schema` (the YAML blocks), `identity` (a cell and its hashes), `checks` (load-time
checks that need the registries), `loading` (files, dicts, overrides).
"""
from dkilab.eval.harness.experiment.checks import (
    CELL_LEVEL_METRICS,
    check_config,
    check_embedder,
    check_live_sweep,
    check_metric_name,
    check_model_spec,
)
from dkilab.eval.harness.experiment.identity import Cell, expand_cells, identity_params
from dkilab.eval.harness.experiment.loading import (
    apply_overrides,
    experiment_from_dict,
    header_comment,
    load_experiment,
    parse_set,
    with_question_limit,
)
from dkilab.eval.harness.experiment.schema import (
    SWEEP_ROOTS,
    DatasetSpec,
    EmbedderSpec,
    ExperimentConfig,
    JudgeSpec,
    ModelSpec,
    StrategySpec,
    model_weights_digest,
)

__all__ = ["CELL_LEVEL_METRICS", "Cell", "DatasetSpec", "EmbedderSpec", "ExperimentConfig", "JudgeSpec", "ModelSpec",
           "SWEEP_ROOTS", "StrategySpec", "apply_overrides", "check_config", "check_embedder", "check_live_sweep",
           "check_metric_name", "check_model_spec", "expand_cells", "experiment_from_dict", "header_comment",
           "identity_params", "load_experiment", "model_weights_digest", "parse_set", "with_question_limit"]
