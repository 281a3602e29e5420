"""What a JAX error raised while tracing means for the user, and the advice that fits it.

JAX's errors name what failed inside JAX; the user needs the line of their code, the input
specs, and the one fix that fits the cause: a Python ``if`` on a graph value wants
``jnp.where`` / ``lax.cond``, a Python ``while`` wants ``lax.while_loop``, ``int(x)`` wants
``x.astype``, ``np.asarray(x)`` wants ``jnp``, an undecided comparison of symbolic dims wants
a constraint over those dims, shapes that differ only for small sizes of a dim want
``constraints=("N >= k",)`` with the ``k`` that makes them agree.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence
from typing import Any

import jax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError, SpecError
from jax2onnx_nn.core.specs import InputSpecs

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# JAX's message for an undecided comparison:
# Symbolic dimension comparison 'S' <= '48' is inconclusive
_COMPARISON = re.compile(
    r"comparison '(?P<a>[^']+)' (?P<op><=|<|>=|>|==|!=) '(?P<b>[^']+)' is inconclusive"
)
_DIVISION = re.compile(r"Cannot divide (?P<a>.+?) by (?P<b>[^.]+)\.")
_LARGEST_BOUND = 64  # the largest k tried for "N >= k" when shapes differ only for small sizes


def spec_error(err: BaseException, specs: InputSpecs, arg_names: Sequence[str]) -> SpecError:
    """A SpecError for a shape error raised while tracing: what JAX said, where, with which
    inputs, and the fix that fits. The JAX error stays reachable as ``.jax_error`` (not
    chained, so no traceback from inside JAX is printed)."""
    # the first lines of JAX's message (frameworks wrap it: Keras puts its own line first)
    text = _ANSI.sub("", str(err))  # Keras bolds its message with terminal escapes
    message = [line.strip() for line in text.strip().splitlines() if line.strip()][:4] or [
        type(err).__name__
    ]
    frame = _innermost_user_frame(traceback.extract_tb(err.__traceback__))
    lines = [f"the inputs do not fit the function: {type(err).__name__}: {message[0].rstrip('.')}"]
    lines += [f"  {line}" for line in message[1:]]
    if frame is not None:
        lines.append(f"  at {_where(frame)}")
    lines.append("input specs:")
    lines += [f"  {line}" for line in specs.describe(arg_names)]
    dims = _dim_names(specs)
    if isinstance(err, jax.errors.InconclusiveDimensionOperation):
        lines.append(_undecided_advice(text, dims))
    else:
        lines.append(_shape_advice(message[0], dims))
    error = SpecError("\n".join(lines))
    error.jax_error = err  # type: ignore[attr-defined]
    return error


def value_error(err: BaseException, specs: InputSpecs, arg_names: Sequence[str]) -> ConversionError:
    """A ConversionError for a graph value used as a Python value while tracing (``if flag:``,
    ``while x > 0:``, ``int(n)``, ``np.asarray(x)``): where the user's code does it, and the
    way out that fits. The JAX error stays reachable as ``.jax_error``."""
    frame = _innermost_user_frame(traceback.extract_tb(err.__traceback__))
    text = _ANSI.sub("", str(err)).strip().splitlines()
    lines = [
        "a value computed from the graph inputs is used as a Python value while tracing (it is "
        f"known only when the model runs): {type(err).__name__}: {text[0] if text else ''}".rstrip(
            ": "
        ),
    ]
    if frame is not None:
        lines.append(f"  at {_where(frame)}")
    lines.append("inputs of the graph:")
    lines += [f"  {line}" for line in specs.describe(arg_names)]
    lines.append(
        _value_advice(err, (frame.line or "") if frame is not None else "", bool(specs.kwargs))
    )
    error = ConversionError("\n".join(lines))
    error.jax_error = err  # type: ignore[attr-defined]
    return error


def is_value_error(err: BaseException) -> bool:
    """A TypeError that is about a traced value where JAX needs a concrete one (``jnp.zeros(n)``
    of a traced ``n``), not about the shapes of the inputs."""
    return isinstance(err, TypeError) and "concrete values" in str(err)


# -- values used in Python ----------------------------------------------------------------------


def _value_kind(err: BaseException, line: str) -> str:
    """What the user's code did with the traced value: ``while``, ``branch`` (if, and, or,
    not, assert), ``number`` (int(), float(), bool(), .item()), ``index`` (range(n), a list
    index), ``numpy`` (np.asarray, np functions) or ``shape`` (a size from a value)."""
    text, code = str(err), line.strip()
    if isinstance(err, jax.errors.TracerArrayConversionError):
        return "numpy"
    if isinstance(err, jax.errors.TracerBoolConversionError):
        if re.match(r"while\b", code):
            return "while"
        if re.search(r"\bbool\(", code) and not re.match(r"(if|elif|assert)\b", code):
            return "number"
        return "branch"
    if isinstance(err, jax.errors.TracerIntegerConversionError):
        return "index"
    if any(
        s in text
        for s in ("`int` function", "`float` function", "`complex` function", "item()", "tolist()")
    ):
        return "number"
    return "shape"


def _value_advice(err: BaseException, line: str, has_input_params: bool) -> str:
    kind = _value_kind(err, line)
    if kind == "while":
        return (
            "Fix: a Python `while` loop cannot test a value of the graph: write it as "
            "jax.lax.while_loop(cond_fun, body_fun, init) (an ONNX Loop; for tract, export with "
            "loop_bound=N), or jax.lax.fori_loop(0, n, body, init) for a number of steps."
        )
    if kind == "branch":
        advice = (
            "Fix: compute both branches with jnp.where(cond, a, b) or lax.cond(cond, ...), so the "
            "condition stays in the graph (`not x`, `and`, `or` are Python branches too: "
            "jnp.logical_not, jnp.logical_and, jnp.logical_or)."
        )
        if has_input_params:
            advice += (
                " A flag given in input_params may instead be static: leave it out of "
                "input_params and bind it with functools.partial(fn, deterministic=True) (the "
                "Dropout and BatchNorm flags of Flax and Equinox layers may stay runtime inputs)."
            )
        return advice
    if kind == "number":
        return (
            "Fix: int(), float(), bool() and .item() make a Python number of it: keep it an array "
            "(x.astype(jnp.int32) for int(x), jnp.asarray(x, "
            "jnp.float32) for float(x)); a size or a "
            "number of steps comes from a shape (x.shape[0], symbolic in the specs) or from a "
            "static value (a constant, functools.partial)."
        )
    if kind == "index":
        return (
            "Fix: it is used as a Python index or count (range(n), a list index, a slice bound): "
            "loop with jax.lax.fori_loop(0, n, body, init) (the count stays in the graph), index "
            "arrays with x[i] or jnp.take(x, i), slice with lax.dynamic_slice(x, (i,), (size,))."
        )
    if kind == "numpy":
        return (
            "Fix: numpy (np.asarray, np.sin, ...) computes "
            "in Python on concrete numbers, not in the "
            "graph: use jax.numpy (jnp.asarray, jnp.sin, ...) on values computed from the inputs; "
            "numpy is fine on constants."
        )
    return (
        "Fix: a size or a static argument is computed from a graph value, and the shapes of the "
        "graph follow from the input shapes alone: take sizes from shapes (x.shape[0], symbolic in "
        "the specs), pad to a largest size and mask with jnp.where, or make the value static "
        "(a constant, functools.partial)."
    )


# -- shapes and symbolic dims ---------------------------------------------------------------------


def _dim_names(specs: InputSpecs) -> list[str]:
    """The symbolic dim names of the input specs, in order of first use."""
    names: dict[str, None] = {}
    for _, leaf in specs.flat()[0]:
        for d in getattr(leaf, "shape", ()):
            names.update(dict.fromkeys(sorted(jxi.dim_vars(d))))
    return list(names)


def _named(text: str, dims: Sequence[str]) -> list[str]:
    return [d for d in dims if re.search(rf"(?<![\w.]){re.escape(d)}(?!\w)", text)]


def _undecided_advice(text: str, dims: Sequence[str]) -> str:
    """The constraint that decides the comparison JAX could not decide, over the dims in it."""
    match = _COMPARISON.search(text)
    if match is not None and match["op"] in ("<=", "<", ">=", ">"):
        a, op, b = match["a"], match["op"], match["b"]
        holds, fails = _as_constraint(a, op, b), _as_constraint(a, _NEGATION[op], b)
        names = _named(f"{a} {b}", dims) or [a]
        return (
            f"JAX could not decide {a} {op} {b} for every "
            f"size of {_listed(names)} the specs allow: "
            f"add constraints={_written((holds,))} if the function is for sizes where it holds (or "
            f"{_written((fails,))} where it does not), or give {_listed(names)} a fixed size."
        )
    names = _named(text, dims)
    if "Cannot divide evenly" in text:
        which = _listed(names or ["the symbolic dim"])
        return (
            f"A reshape needs a size in {which} to divide evenly, which the specs do not say and "
            "constraints cannot state: write the dim as a "
            "multiple in the spec (e.g. '4*K' in place of "
            f"'{(names or ['B'])[0]}' when it is a multiple of 4), or give {which} a fixed size."
        )
    match = _DIVISION.search(text)
    if match is not None:
        return (
            f"JAX cannot tell that {match['a']} divides by {match['b']} for every size the specs "
            f"allow (constraints cannot state that): write the dim as a multiple in the spec, e.g. "
            f"'{match['b'].strip()}*K' in place of '{match['a'].strip()}', or give it a fixed size."
        )
    if "requires a constant" in text:
        return (
            f"The function needs {_listed(names or ['a symbolic dim'])} "
            "as a Python int (range(), numpy "
            "shapes): give it a fixed size in the specs, or use jnp / lax operations, which take "
            "symbolic sizes."
        )
    which = _listed(names) if names else "the symbolic dims"
    return (
        f"An operation on {which} is not decided by the specs: add constraints over {which} "
        "(e.g. 'N >= 2', 'N <= 512') for what the function assumes, or give them fixed sizes."
    )


_NEGATION = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}


def _as_constraint(a: str, op: str, b: str) -> str:
    """``a op b`` as JAX takes a constraint (``>=``, ``<=``): ``S > 48`` -> ``S >= 49``."""
    if op in ("<=", ">="):
        return f"{a} {op} {b}"
    shift = 1 if op == ">" else -1
    bound = (
        f"{int(b) + shift}"
        if re.fullmatch(r"-?\d+", b.strip())
        else f"{b} {'+' if shift > 0 else '-'} 1"
    )
    return f"{a} {'>=' if op == '>' else '<='} {bound}"


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def _shape_advice(first_line: str, dims: Sequence[str]) -> str:
    """For shapes that do not fit: the constraint ``N >= k`` under which the shapes JAX names
    agree (a slice of a symbolic dim is clamped at 0, ``max(0, N - 2)``, so its size equals
    ``N - 2`` only for ``N >= 2``), or the comparison a ``min`` / ``max`` in them leaves open
    (``min(48, S)`` is ``S`` for ``S <= 48``), else the specs to change."""
    names = _named(first_line, dims)
    if not names:
        return (
            "Change the specs (rank, sizes, dtypes, number of inputs) to what the function expects."
        )
    shapes = _shapes_in(first_line)
    broadcast = "broadcast" in first_line
    parsed = len(shapes) >= 2 and _agree(shapes, (), broadcast) is not None
    for k in range(2, _LARGEST_BOUND + 1 if parsed else 2):
        constraints = tuple(f"{d} >= {k}" for d in names)
        if _agree(shapes, constraints, broadcast):
            return (
                f"The shapes agree for {_listed(constraints)} "
                "and differ for smaller sizes, which the "
                "specs allow (a slice such as x[1:-1] of a "
                f"symbolic dim is max(0, {names[0]} - 2) long): "
                f"add constraints={_written(constraints)} (or "
                "the bounds the function assumes), or give "
                f"{_listed(names)} a fixed size."
            )
    for constraint in _bound_comparisons(" ".join(shapes)) if parsed else ():
        if _agree(shapes, (constraint,), broadcast):
            involved = _named(constraint, dims)
            return (
                f"The shapes agree for {constraint} and differ otherwise, which the specs allow "
                f"(a slice or pad of a symbolic dim is bounded by min / max): add "
                f"constraints={_written((constraint,))} if the function is for those sizes, or "
                f"give {_listed(involved or names)} a fixed size."
            )
    if parsed:
        return (
            f"No constraint on {_listed(names)} makes these "
            "shapes agree: change the specs (rank, sizes, "
            "dtypes, number of inputs) to what the function expects."
        )
    example = (_bound_comparisons(first_line) or [f"{names[0]} >= 2"])[0]
    return (
        f"The shapes involve {_listed(names)}: if they differ only for some sizes, state the sizes "
        f"the function is for with constraints (e.g. constraints={_written((example,))}); "
        "otherwise change the specs (rank, sizes, dtypes, number of inputs) to what the function "
        "expects."
    )


def _bound_comparisons(shapes: str) -> list[str]:
    """The two ways each ``min(a, b)`` / ``max(a, b)`` of the shapes is decided, as constraints
    (``min(48, S)``: ``48 >= S``, ``48 <= S``): the comparison a slice's clamp left open, over
    the dims it involves."""
    found = []
    for a, b in _MIN_MAX.findall(shapes):
        if re.fullmatch(r"\s*-?\d+\s*", a):  # the dim first: "S <= 48"
            a, b = b, a
        found += [f"{a} <= {b}", f"{a} >= {b}"]
    return list(dict.fromkeys(found))


_MIN_MAX = re.compile(r"\b(?:min|max)\(([^(),]+), ([^(),]+)\)")


def _shapes_in(text: str) -> list[str]:
    """The top-level parenthesised groups of ``text`` that are not a function's arguments
    (``(max(0, N - 2),)``, ``(N,)``), as written."""
    groups, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")" and depth:
            depth -= 1
            if depth == 0 and not (start and (text[start - 1].isalnum() or text[start - 1] == "_")):
                groups.append(text[start : i + 1])
    return groups


def _written(constraints: Sequence[str]) -> str:
    """``constraints`` as the user writes them: ``("N >= 2",)``."""
    return (
        "("
        + ", ".join(f'"{c}"' for c in constraints)
        + ("," if len(constraints) == 1 else "")
        + ")"
    )


def _agree(shapes: list[str], constraints: tuple[str, ...], broadcast: bool) -> bool | None:
    """Whether the shapes, parsed under ``constraints``, are equal dim by dim (right-aligned and
    equal or 1 for broadcasting); None where one does not parse."""
    try:
        scope = jxi.new_symbolic_scope(constraints)
        parsed = [jxi.parse_symbolic_shape(s, scope) for s in shapes]
    except Exception:
        return None
    first = parsed[0]
    for other in parsed[1:]:
        if not broadcast and len(other) != len(first):
            return False
        for a, b in zip(reversed(first), reversed(other), strict=False):  # broadcast: right-aligned
            if not (a == b or (broadcast and (a == 1 or b == 1))):
                return False
    return True


# -- where in the user's code ---------------------------------------------------------------------


def user_frame(tb: Any) -> str:
    """``file:line (function)`` of the innermost frame of a traceback in the user's code
    (outside JAX, this package and the frameworks), or ""."""
    frame = _innermost_user_frame(traceback.extract_tb(tb))
    return _where(frame) if frame is not None else ""


def calling_user_frame() -> str:
    """:func:`user_frame` of the running code: the user's line that led here (for errors an
    adapter raises while tracing)."""
    frame = _innermost_user_frame(traceback.extract_stack())
    return _where(frame) if frame is not None else ""


def _where(frame: traceback.FrameSummary) -> str:
    return f"{frame.filename}:{frame.lineno} ({frame.name})"


def _innermost_user_frame(frames: traceback.StackSummary) -> traceback.FrameSummary | None:
    library = jxi.library_dirs()
    for frame in reversed(frames):
        if not frame.filename.startswith((*library, "<frozen")):
            return frame
    return None
