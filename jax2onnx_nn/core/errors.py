"""The errors a user sees: what is wrong and where, never a trace from deep inside."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass


class SpecError(ValueError):
    """An input spec (shape, dtype, pytree) that cannot be understood."""


@dataclass(frozen=True)
class UnsupportedUse:
    """One unsupported primitive and where the user's code used it."""

    primitive: str
    count: int
    locations: tuple[str, ...]


class ConversionError(Exception):
    """Raised when a callable cannot be exported; lists every unsupported primitive at once."""

    def __init__(self, message: str, unsupported: tuple[UnsupportedUse, ...] = ()) -> None:
        super().__init__(message)
        self.unsupported = unsupported

    @classmethod
    def from_unsupported(cls, uses: dict[str, list[str]]) -> ConversionError:
        records = tuple(
            UnsupportedUse(name, len(locations), tuple(dict.fromkeys(locations)))
            for name, locations in sorted(uses.items())
        )
        lines = [f"{len(records)} unsupported primitive(s); nothing was exported:"]
        for r in records:
            where = ", ".join(loc or "<unknown location>" for loc in r.locations[:5]) + (" ..." if len(r.locations) > 5 else "")
            lines.append(f"  {r.primitive} (used {r.count}x) at {where}")
        lines.append(
            "Register a lowering with @jax2onnx_nn.lowering(primitive) or pass lowerings={...}."
        )
        return cls("\n".join(lines), records)


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised in this package that points at the first caller
    outside it (the user's export call), past the frames of context managers used as
    decorators (``export_model``'s)."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and (os.path.abspath(frame.f_code.co_filename).startswith(own) or frame.f_code.co_filename == contextlib.__file__):
        frame, level = frame.f_back, level + 1
    return level
