"""`dkilab gpu`: the GPU comparison as one unattended, resumable command (see `command.py`).

- `preflight`: the device, every model's weights and every dataset checked before anything loads;
- `smoke`: K/V exactness and continuity, batched = unbatched, the judge on the device, accelerate with
  two processes, on the offline model and tiny random architectures (on CPU with `--cpu`, so CI runs it);
- `plan`: cells, questions and an estimated time per config from throughput measured on the model;
- `command`: preflight, smoke, plan, the configs, then one report folder.
"""
