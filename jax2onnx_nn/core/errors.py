"""The errors a user sees: what is wrong and where, never a trace from deep inside."""

from __future__ import annotations

import contextlib
import os
import sys
import types
from dataclasses import dataclass


class SpecError(ValueError):
    """An input spec (shape, dtype, pytree) that cannot be understood."""


@dataclass(frozen=True)
class UnsupportedUse:
    """One unsupported primitive and where the user's code used it."""

    primitive: str
    count: int
    locations: tuple[str, ...]


class VectorSignWarning(UserWarning):
    """An export whose eigen-, singular or Schur vectors may differ from JAX's by a sign (a
    phase, for complex ones): a lowering that does not follow LAPACK's path for that size or
    dtype. The values are JAX's; a program that reads the vectors' signs (a PCA projection,
    an embedding) should fix them itself. Filter it with ``warnings.filterwarnings("ignore",
    category=jax2onnx_nn.VectorSignWarning)`` once that is done."""


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
            where = ", ".join(loc or "<unknown location>" for loc in r.locations[:5]) + (
                " ..." if len(r.locations) > 5 else ""
            )
            lines.append(f"  {r.primitive} (used {r.count}x) at {where}")
        on_complex = [
            r.primitive.removesuffix(ON_COMPLEX)
            for r in records
            if r.primitive.endswith(ON_COMPLEX)
        ]
        callbacks = [r.primitive for r in records if r.primitive in _CALLBACKS]
        if callbacks:
            verb = "calls" if len(callbacks) == 1 else "call"
            lines.append(
                f"{' and '.join(callbacks)} {verb} Python when the model runs, which an ONNX graph "
                "cannot: compute the callback's result with jax.numpy in the exported function, or "
                "register a lowering that writes it as ONNX ops: "
                f'@jax2onnx_nn.lowering("{callbacks[0]}") (the rule gets the callback as its '
                "callback= parameter)."
            )
        if len(on_complex) + len(callbacks) < len(records):
            lines.append(
                "Register a lowering with @jax2onnx_nn.lowering(primitive) or pass lowerings={...}."
            )
        if on_complex:
            # a rule registered without complex_pairs=True is never given a complex equation
            lines.append(
                "Complex values are (real, imag) float pairs in the graph: a lowering of a "
                "primitive on "
                "complex numbers takes and returns the pairs, registered with "
                "@jax2onnx_nn.lowering(primitive, complex_pairs=True)."
            )
        factorizations = [name for name in on_complex if name in _LINALG]
        if factorizations:
            lines.append(
                f"lax.linalg's {', '.join(factorizations)} of complex matrices "
                f"{'is' if len(factorizations) == 1 else 'are'} "
                "not lowered: solve a complex system A x = b as the real one [[A.real, -A.imag], "
                "[A.imag, A.real]] "
                "[x.real; x.imag] = [b.real; b.imag] (jnp.block), or cast to a real dtype where "
                "the values are real."
            )
        return cls("\n".join(lines), records)


ON_COMPLEX = (
    " on complex numbers"  # how the interpreter names a complex equation without a pair lowering
)
_CALLBACKS = frozenset({"pure_callback", "io_callback"})  # Python called when the model runs
# lax.linalg primitives (on complex numbers, eig and schur are lowered; those named here may not be)
_LINALG = frozenset(
    {
        "cholesky",
        "cholesky_update",
        "eigh",
        "geqp3",
        "geqrf",
        "hessenberg",
        "householder_product",
        "lu",
        "ormqr",
        "qr",
        "svd",
        "symmetric_product",
        "triangular_solve",
        "tridiagonal",
        "tridiagonal_solve",
    }
)


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised in this package that points at the first caller
    outside it (the user's export call), past the frames of context managers used as
    decorators (``export_model``'s)."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and (
        os.path.abspath(frame.f_code.co_filename).startswith(own)
        or frame.f_code.co_filename == contextlib.__file__
    ):
        frame, level = frame.f_back, level + 1
    return level
