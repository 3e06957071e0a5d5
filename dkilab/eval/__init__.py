"""Evaluation, in five packages, lowest first (each imports only from those before it; tests/test_layers.py):
`data` (dataset loaders, the normalised format, published predictions), `scoring` (metrics, scorers, judges),
`tracking` (MLflow logging, run state, stores, UI, team server), `views` (tables, plots, card, report) and
`harness` (experiments, preparing and running cells, resume, claims, executors)."""
