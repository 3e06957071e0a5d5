"""The processes of a run: accelerate's state (one process, or `accelerate launch --num_processes N`, on CPU a
gloo group) and what the main process decides, sent to the others (`broadcast`)."""
from __future__ import annotations

import os
from datetime import timedelta


def process_state():
    """accelerate's PartialState; on a machine without CUDA, processes started by `accelerate launch
    --multi_gpu --num_processes N` (or torchrun) join a gloo group on CPU."""
    import torch
    from accelerate import PartialState

    # collectives wait this long for a slow process (the main one scoring and logging) before the job
    # stops with the rank that did not answer; NCCL's default 10 minutes is too short for a judged cell
    timeout = timedelta(seconds=float(os.environ.get("DKILAB_COLLECTIVE_TIMEOUT", 7200)))
    return PartialState(cpu=not torch.cuda.is_available(), timeout=timeout)


def broadcast(state, value):
    if state.num_processes <= 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box)
    return box[0]
