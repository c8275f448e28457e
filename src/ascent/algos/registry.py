"""A registry maps names to functions; an unknown name may be an import path.

The built-in entries are listed explicitly where each family lives
(``ascent.algos.advantages.ADVANTAGE_ESTIMATORS``, ``ascent.algos.losses.POLICY_LOSSES``);
there is no import-time magic. Users add their own either by ``register`` in code, or by
naming ``module:function`` / ``file.py:function`` in the config, which ``get`` resolves.
"""

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from ascent.importing import load_object

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Named functions of one kind (``kind`` is used in error messages)."""

    def __init__(self, kind: str, entries: dict[str, F]) -> None:
        self.kind = kind
        self._entries: dict[str, F] = dict(entries)

    def register(self, name: str, fn: F | None = None, *, replace: bool = False) -> Callable:
        """Add ``fn`` under ``name``; usable as ``@registry.register("name")``.

        Registering an existing name is an error unless ``replace=True``, so that a typo
        cannot silently shadow a built-in.
        """

        def add(function: F) -> F:
            if name in self._entries and not replace:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered; pass replace=True to override"
                )
            self._entries[name] = function
            return function

        return add if fn is None else add(fn)

    def get(self, name: str) -> F:
        """The function registered as ``name``, or loaded from an import path (contains ':')."""
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            fn = load_object(name)
            if not callable(fn):
                raise TypeError(f"{self.kind} {name!r} is not callable (got {type(fn).__name__})")
            return fn
        close = difflib.get_close_matches(name, self._entries, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise KeyError(
            f"unknown {self.kind} {name!r}{hint} Known: {', '.join(sorted(self._entries))}. "
            "A custom one can be named as 'package.module:function' or 'file.py:function'."
        )

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
