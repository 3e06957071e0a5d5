"""The harness: experiment configs and their cells (`experiment`), preparing one cell and running it (`cell`),
the runner that orders, claims, resumes and logs cells (`runner`), re-scoring, executors and the budgets check."""
