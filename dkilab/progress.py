"""Progress of a long step (a cell's questions, the judge's batches): done of total, rate and time left. On a
terminal a tqdm bar; in a log or CI (stderr not a terminal) one line at the first item and then every
`$DKILAB_PROGRESS_EVERY` seconds (default 30), so a run that is working never looks hung."""
from __future__ import annotations

import os
import sys
import time

from tqdm.auto import tqdm

EVERY_ENV = "DKILAB_PROGRESS_EVERY"


def _span(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    def __init__(self, total: int, desc: str, unit: str = "questions", enabled: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.desc, self.unit, self.enabled = total, desc, unit, enabled and total > 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = float(os.environ.get(EVERY_ENV, 30))
        self.done, self.start = 0, time.perf_counter()
        self.last: float | None = None
        self.bar = tqdm(total=total, desc=desc, leave=False, file=self.stream,
                        disable=not (self.enabled and self.tty))

    def line(self) -> str:
        spent = time.perf_counter() - self.start
        rate = self.done / spent if spent > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f", about {_span(left)} left" if left == left and self.done < self.total else ""
        per = f"{rate:.2f} {self.unit}/s" if rate >= 1 else f"{spent / max(self.done, 1):.1f} s each"
        return f"{self.desc}: {self.done}/{self.total} {self.unit} ({per}{eta})"

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.tty:
            self.bar.update(n)
            return
        now = time.perf_counter()
        if self.enabled and (self.last is None or now - self.last >= self.every or self.done >= self.total):
            self.last = now
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        self.bar.close()
