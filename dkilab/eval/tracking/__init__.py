"""MLflow: what a run logs (`runs`, `assessments`), reading stores back (`store_uri`), run state and claims
between processes (`runstate`, `journal`), the UI and the team server."""
