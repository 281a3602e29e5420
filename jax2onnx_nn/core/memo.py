"""Bounded memos of what a warm export reuses: a second export of the same function in a
process asks again for parsed specs, signatures, call traces and constant folds, and gets
the answers of the first one.

Each memo holds at most ``size`` entries; a new entry beyond that drops the one used least
recently, so a process exporting many different models keeps the recent ones and a fixed
amount of memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_ABSENT = object()


class BoundedMemo(Generic[V]):
    """``key -> value`` for at most ``size`` keys, least recently used out first.

    A stored ``None`` is an answer like any other (a fold known not to apply). A key of
    ``None`` means "not memoizable" (what the value depends on has no hashable key): it is
    computed each time and never stored.

    Example::

        _SIGNATURES: BoundedMemo[list[str]] = BoundedMemo(256)
        names = _SIGNATURES.get_or_make(fn.__code__, lambda: signature_names(fn))
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least one entry, got size={size}")
        self.size = size
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable | None, default: V | None = None) -> V | None:
        """The value stored for ``key`` (now the most recently used), else ``default``."""
        if key is None:
            return default
        value = self._entries.get(key, _ABSENT)
        if value is _ABSENT:
            return default
        self._entries.move_to_end(key)
        return value  # type: ignore[return-value]

    def put(self, key: Hashable | None, value: V) -> V:
        """Store ``value`` for ``key`` (a ``None`` key: nothing is stored); returns ``value``."""
        if key is not None:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def get_or_make(self, key: Hashable | None, make: Callable[[], V]) -> V:
        """The value stored for ``key``, or ``make()`` stored under it."""
        value = self.get(key, _ABSENT)  # type: ignore[arg-type]
        if value is _ABSENT:
            return self.put(key, make())
        return value  # type: ignore[return-value]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries


__all__ = ["BoundedMemo"]
