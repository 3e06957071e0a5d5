"""Recall signals added beside the built-in ones (keywords, vectors, the reference scope): one file each in
this package, a `RecallSignal` subclass registered with `@register_signal`, switched on per experiment with
its fusion weight (`recall.signals.plugins: {name: weight}`). Under the learned fusion each signal's declared
`features` join the candidates' feature rows; a fusion model not fitted with them gives them zero weight and
says so, so adding a signal needs no shipped model (docs/extending.md)."""
from dkilab.recall.signals.base import SIGNALS, RecallSignal, register_signal

__all__ = ["SIGNALS", "RecallSignal", "register_signal"]
