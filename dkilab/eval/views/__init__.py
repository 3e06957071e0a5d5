"""What a person reads: comparison tables and paired statistics (`tables`), plots, the methodology card,
`dkilab report`, and those views as a run's MLflow artifacts (`logged`)."""
