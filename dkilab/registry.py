"""The registry every pluggable component registers in: strategies, datasets, metrics, scorers, prompt
formatters and model loaders. Each registry lives with the interface it holds (`STRATEGIES` in
`dkilab.strategies`, `DATASETS` in `dkilab.eval.data`, `METRICS` and `SCORERS` in
`dkilab.eval.scoring`, `FORMATTERS` in `dkilab.recall.formatters`, `MODELS` in `dkilab.models.specs` for the backends of
`dkilab.models.backends`), is typed
by it, and refuses a component that is not one (`kind=`: a subclass of the interface, an instance of it,
or a callable).

A component registers itself with a decorator and carries its declarations as metadata:

    @register                                    # a Strategy subclass; name from the class's `name`
    class MyStrategy(Strategy): ...

    @register_dataset("mydata", language="en", scorer="f1", version="1")
    def load_mydata(data_dir, limit=None, question_limit=None): ...

A registry with `discover=` imports every module of that package the first time it is read, so a
new strategy (or dataset loader, or metric module) is one file dropped into its package: nothing
else to edit. `import dkilab.registry` imports nothing heavy.
"""
from __future__ import annotations

import difflib
import pkgutil
import threading
from importlib import import_module
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name no component is registered under; the message lists the known ones (did you mean ...?)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Registry(Generic[T]):
    """name -> component, with per-name metadata (the component's declarations)."""

    def __init__(self, kind: str, discover: str | tuple[str, ...] | None = None, *, subclass_of: type | None = None,
                 instance_of: type | None = None):
        """`subclass_of`: the registry holds classes deriving from it; `instance_of`: instances of it;
        neither: callables."""
        if subclass_of is not None and instance_of is not None:
            raise TypeError("a registry holds subclasses or instances of its interface, not both")
        self.kind = kind
        self.subclass_of, self.instance_of = subclass_of, instance_of
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._discover = (discover,) if isinstance(discover, str) else tuple(discover or ())
        self._discovered = not self._discover
        self._lock = threading.RLock()

    # --- registration -------------------------------------------------------------------
    def register(self, name: str | None = None, **meta: Any) -> Callable[[T], T]:
        """Decorator; `name` defaults to the component's `name` attribute."""

        def deco(obj: T) -> T:
            self.add(name or getattr(obj, "name", None), obj, **meta)
            return obj

        return deco

    def add(self, name: str | None, obj: T, **meta: Any) -> T:
        if not name or not isinstance(name, str):
            raise TypeError(f"a {self.kind} needs a non-empty name, got {name!r} for {obj!r}")
        self._check(name, obj)
        with self._lock:
            if name in self._items and self._items[name] is not obj and not _same_definition(self._items[name], obj):
                raise ValueError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r}, {obj!r})")
            self._items[name] = obj
            self._meta[name] = dict(meta)
        return obj

    def _check(self, name: str, obj: Any) -> None:
        if self.subclass_of is not None:
            ok = isinstance(obj, type) and issubclass(obj, self.subclass_of)
            want = f"a subclass of {self.subclass_of.__name__}"
        elif self.instance_of is not None:
            ok, want = isinstance(obj, self.instance_of), f"an instance of {self.instance_of.__name__}"
        else:
            ok, want = callable(obj), "callable"
        if not ok:
            raise TypeError(f"{self.kind} {name!r} must be {want}, got {obj!r}")

    def remove(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)
            self._meta.pop(name, None)

    # --- lookup -------------------------------------------------------------------------
    def _ensure(self) -> None:
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            for package in self._discover:
                pkg = import_module(package)
                for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):  # a plain module: imported above
                    if not info.name.startswith("_"):
                        import_module(f"{package}.{info.name}")

    def __getitem__(self, name: str) -> T:
        self._ensure()
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise UnknownNameError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._items)}; "
                                   f"registered: {', '.join(sorted(self._items))}") from None

    def get(self, name: str, default: Any = None) -> T | Any:
        self._ensure()
        return self._items.get(name, default)

    def meta(self, name: str) -> dict[str, Any]:
        self[name]  # the error for an unknown name
        return self._meta[name]

    def __contains__(self, name: object) -> bool:
        self._ensure()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._ensure()
        return iter(list(self._items))

    def __len__(self) -> int:
        self._ensure()
        return len(self._items)

    def names(self) -> list[str]:
        return sorted(self)

    def items(self) -> list[tuple[str, T]]:
        self._ensure()
        return list(self._items.items())

    def values(self) -> list[T]:
        return [v for _, v in self.items()]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._items)} registered)"


def _same_definition(a: Any, b: Any) -> bool:
    """A module imported twice (e.g. as __main__ and by name) re-registers the same definition."""
    return (getattr(a, "__qualname__", None) == getattr(b, "__qualname__", object())
            and getattr(a, "__module__", None) == getattr(b, "__module__", object()))
