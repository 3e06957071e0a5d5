"""The model backends, one module each, every one registering its loader in `MODELS` (dkilab/models/specs.py), which
discovers this package: `local` (offline GGUF builds and transformers models), `openai_client` (OpenAI-compatible
endpoints), `scripted` (answers read from a file, for pipeline tests). A new backend is a new file here."""
