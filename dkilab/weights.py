"""What every loader of Hugging Face weights shares (the models under test and the sentence encoders)."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def quiet_loading():
    """No weight-loading progress bars (transformers' tqdm on stderr: red boxes in a notebook, noise in a log
    of a sweep); restored afterwards to what it was."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
