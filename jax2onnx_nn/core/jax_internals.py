"""Every use of JAX internals lives here, so that JAX upgrades touch one file.

jax2onnx_nn supports the JAX of Python 3.11 (0.10.x) and of newer Pythons (0.12.x). Public
JAX API is used everywhere else; what it does not expose (the structure of symbolic dims,
source locations of equations, extended key dtypes) is reached through the functions below.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import types
import weakref
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend as jex
import numpy as np
from jax import export as jax_export

from jax2onnx_nn.core.memo import BoundedMemo

Jaxpr = jex.core.Jaxpr
ClosedJaxpr = jex.core.ClosedJaxpr
JaxprEqn = jex.core.JaxprEqn
Literal = jex.core.Literal
Var = jex.core.Var
Primitive = jex.core.Primitive

try:  # DropVar moved between modules across versions
    DropVar = jex.core.DropVar
except AttributeError:  # pragma: no cover - depends on the JAX version
    from jax._src.core import DropVar  # type: ignore[no-redef]  # noqa: F401

from jax._src import core as _core  # noqa: E402
from jax._src import source_info_util as _source_info_util  # noqa: E402


def is_literal(atom: Any) -> bool:
    return isinstance(atom, Literal)


def literal_value(atom: Any) -> Any:
    return atom.val


def is_symbolic_dim(d: Any) -> bool:
    """True for a symbolic dimension expression (B, 2*B, B//2, ...)."""
    return not isinstance(d, (int, np.integer)) and hasattr(d, "_sorted_terms")


def min_dim(a: Any, b: Any) -> Any:
    """The smaller dim by JAX's rule that a symbolic one is >= 1 (``min(N, 1)`` is 1)."""
    return _core.min_dim(a, b)


def symbolic_scope(d: Any) -> Any:
    return d.scope


def new_symbolic_scope(constraints: tuple[str, ...] = ()) -> Any:
    return jax_export.SymbolicScope(constraints)


def parse_symbolic_shape(spec: str, scope: Any) -> tuple[Any, ...]:
    return tuple(jax_export.symbolic_shape(spec, scope=scope))


def dim_structure(d: Any) -> list[tuple[list[tuple[Any, int]], int]]:
    """A symbolic dim as a sum of coefficient * product of factors.

    Returns ``[(factors, coeff), ...]`` where ``factors`` is ``[(factor, exponent), ...]``
    (empty for the constant term). Use ``factor_var`` / ``factor_operation`` on a factor.
    """
    terms = []
    for term, coeff in d._sorted_terms:
        terms.append(([(f, e) for f, e in term._factors], int(coeff)))
    return terms


def factor_var(factor: Any) -> str | None:
    return factor.var


def factor_operation(factor: Any) -> tuple[str, tuple[Any, ...]]:
    """('floordiv' | 'mod' | 'max' | 'min', operands) of a non-variable factor."""
    return factor.operation, tuple(factor.operands)


def dim_vars(d: Any) -> set[str]:
    return set(d._get_vars()) if is_symbolic_dim(d) else set()


# Frames that are not the user's line either: this package (coarse-op wrappers, batching
# rules), JAX, numpy and the frameworks whose layers the user calls (their adapters add them).
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FRAMEWORKS: list[str] = ["jax", "numpy"]


def add_library_package(name: str) -> None:
    """Frames in the top-level package ``name`` (a framework) are library code, not the user's."""
    if name not in _FRAMEWORKS:
        _FRAMEWORKS.append(name)


def library_dirs() -> tuple[str, ...]:
    """Folders of code that is not the user's: this package, JAX and the frameworks."""
    return _library()[0]


@functools.lru_cache(maxsize=8)
def _library_for(files: tuple[str | None, ...]) -> tuple[tuple[str, ...], dict[str, bool]]:
    """The library folders for these framework files, and a memo: file name -> whether a
    frame there is library code (filled by :func:`_is_library`)."""
    return (_OWN_DIR, *(os.path.dirname(p) + os.sep for p in files if p)), {}


def _library() -> tuple[tuple[str, ...], dict[str, bool]]:
    # a framework imported (or registered) later changes the folders: keyed by their files
    return _library_for(
        tuple(getattr(sys.modules.get(name), "__file__", None) for name in _FRAMEWORKS)
    )


def _is_library(file_name: str, library: tuple[tuple[str, ...], dict[str, bool]]) -> bool:
    """Whether a frame in ``file_name`` is not the user's: JAX's own filter (internal frames,
    the standard library) or one of the library folders; memoized per file."""
    dirs, memo = library
    known = memo.get(file_name)
    if known is None:
        known = memo[file_name] = not _source_info_util.is_user_filename(
            file_name
        ) or file_name.startswith(dirs)
    return known


def source_line(eqn: Any, *, library_ok: bool = False) -> str:
    """The user's source location of an equation, like ``model.py:12 (__call__)``: the
    innermost frame outside JAX, this package and the frameworks; "" when there is none (a
    body JAX traced inside a library function, an equation made by a batching rule of
    ours), so that the caller's line stands. ``library_ok``: else the innermost frame outside
    JAX and this package (a framework layer exported by itself has no user frame at all).

    Called for every equation lowered (nodes carry the line): the frames are classified by
    file name, memoized, and only the frame found is turned into a line number."""
    try:
        traceback = eqn.source_info.traceback
        if traceback is None:
            return ""
        codes, lastis = traceback.raw_frames()
        library = _library()
        found = next(
            (i for i, code in enumerate(codes) if not _is_library(code.co_filename, library)), None
        )
        if found is None and library_ok:
            found = next(
                (
                    i
                    for i, code in enumerate(codes)
                    if _source_info_util.is_user_filename(code.co_filename)
                    and not code.co_filename.startswith(_OWN_DIR)
                ),
                None,
            )
        if found is None:
            return ""
        code, lasti = codes[found], lastis[found]
        # code objects compare equal across files of the same source: the file is in the key
        return _LINES.get_or_make((code, code.co_filename, lasti), lambda: _line(code, lasti))
    except Exception:  # pragma: no cover - defensive: source info is best effort
        return ""


def _line(code: types.CodeType, lasti: int) -> str:
    frame = _source_info_util.raw_frame_to_frame(code, lasti)
    column = f":{frame.start_column}" if frame.start_column else ""
    return f"{frame.file_name}:{frame.start_line}{column} ({frame.function_name})"


_LINES: BoundedMemo[str] = BoundedMemo(
    4096
)  # (code, file, instruction) -> its line: each warm export asks again


def name_stack(eqn: Any) -> str:
    """The ``jax.named_scope`` names around an equation, joined by "/" (transforms left out)."""
    try:
        stack = eqn.source_info.name_stack.stack
        return "/".join(e.name for e in stack if type(e).__name__ == "Scope")
    except Exception:  # pragma: no cover
        return ""


@contextlib.contextmanager
def x64(enabled: bool) -> Iterator[None]:
    """Trace with jax_enable_x64 set as asked, restoring the previous value afterwards."""
    previous = bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]  # set at run time
    if previous == enabled:
        yield
        return
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def _fun_sourceinfo(fun: Any) -> str:
    """JAX's name of a traced callable (``f at file.py:12``), as ``api_util.fun_sourceinfo``
    gives it, without ``str()`` of a callable that is not a function: JAX formats any
    other object (an Equinox module's whole pretty-printed tree, a partial holding a jaxpr)
    only to look for ``<built-in function name>`` in the text. Unwraps as JAX 0.12 does."""
    fun = inspect.unwrap(fun)
    while isinstance(fun, functools.partial):
        fun = inspect.unwrap(fun.func)
    code = getattr(fun, "__code__", None)
    if code is not None and hasattr(fun, "__name__"):
        return f"{fun.__name__} at {code.co_filename}:{code.co_firstlineno}"
    if isinstance(fun, types.BuiltinFunctionType):  # "<built-in function abs>": cheap to format
        match = re.match(r"<built-in function (\S+)>", str(fun))
        return match.group(1) if match else "<unknown>"
    return "<unknown>"


@contextlib.contextmanager
def quick_function_names() -> Iterator[None]:
    """While the block runs, JAX names the callables it traces with :func:`_fun_sourceinfo`
    (``jax.vmap`` and ``jax.make_jaxpr`` name each one: a vmapped Equinox module is
    pretty-printed in full each time otherwise). Names are for JAX's messages only."""
    from jax._src import api_util

    original = api_util.fun_sourceinfo
    api_util.fun_sourceinfo = _fun_sourceinfo
    try:
        yield
    finally:
        api_util.fun_sourceinfo = original


def trace_context() -> Any:
    """The hashable state of JAX's configuration that a trace depends on (x64, the vmap axis
    environment, default precisions, ...): what ``jax.jit`` keys its own trace cache on."""
    from jax._src import config

    return config.trace_context()


def is_key_dtype(dtype: Any) -> bool:
    """True for the extended dtype of typed PRNG keys (``jax.random.key``)."""
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def key_data_shape(dtype: Any) -> tuple[int, ...]:
    """Trailing shape of the uint32 data behind one key of this key dtype."""
    return tuple(dtype._impl.key_shape)


def key_impl(dtype: Any) -> Any:
    return dtype._impl


def subjaxprs_of(params: dict[str, Any]) -> list[Any]:
    """Jaxprs (open or closed) among an equation's params, in param order."""
    found = []
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, (Jaxpr, ClosedJaxpr)):
                found.append(v)
    return found


def live_equations(jaxpr: Any, used_outputs: Sequence[bool] | None = None) -> list[Any]:
    """The equations the used outputs need, in order, unread results ``DropVar`` (eigvalsh's
    eigh vectors), those with no result read and no effects left out. JAX's ``dce_jaxpr`` would
    rewrite calls' params (and jit text ``recognize_calls`` compares): see ``used_outputs``."""
    used = [True] * len(jaxpr.outvars) if used_outputs is None else used_outputs
    live = {v for v, u in zip(jaxpr.outvars, used, strict=True) if u and isinstance(v, Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        read = [v in live for v in eqn.outvars]
        if not all(read):
            if not any(read) and not eqn.effects:
                continue
            outvars = [v if r else DropVar(v.aval) for v, r in zip(eqn.outvars, read, strict=True)]
            eqn = eqn.replace(outvars=outvars)
        kept.append(eqn)
        live.update([v for v in eqn.invars if isinstance(v, Var)])  # a Literal is unhashable
    kept.reverse()
    return kept


def as_closed(jaxpr: Any) -> Any:
    if isinstance(jaxpr, ClosedJaxpr):
        return jaxpr
    return ClosedJaxpr(jaxpr, ())


def bind_equation(eqn: Any, args: Any) -> list[Any]:
    """Bind ``eqn``'s primitive on ``args`` (values or tracers), as ``eval_jaxpr`` does;
    always a list of results."""
    bound = eqn.primitive.get_bind_params(eqn.params)
    # JAX 0.10 returns the params (sub-functions among them), older versions (subfuns, params)
    subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
    outs = eqn.primitive.bind(*subfuns, *args, **params)
    return list(outs) if eqn.primitive.multiple_results else [outs]


def primitive_impl_jaxpr(prim: Any, params: dict[str, Any], avals: list[Any]) -> Any | None:
    """Trace a primitive's Python implementation, for primitives defined by libraries.

    Returns the ClosedJaxpr of the implementation, or None when the implementation is not
    itself JAX code (it binds the same primitive again, or cannot be traced).
    """
    # JAX >= 0.12 defines some jnp functions (searchsorted, frexp, ldexp, nonzero, ...) as
    # "hijax" primitives, all bound as ``call_hi_primitive``; ``to_lojax`` is their expansion
    # into ordinary lax primitives, while ``impl`` would bind them again.
    hi = prim.name == "call_hi_primitive" and hasattr(prim, "to_lojax")
    impl = prim.to_lojax if hi else getattr(prim, "impl", None)
    if impl is None:
        return None
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    try:
        closed = jax.make_jaxpr(lambda *args: impl(*args, **params))(*specs)
    except Exception:
        return None
    if _binds(closed.jaxpr, prim):
        return None
    return closed


def _binds(jaxpr: Any, prim: Any) -> bool:
    """Whether ``jaxpr`` binds ``prim`` anywhere, nested bodies included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive is prim:
            return True
        for sub in subjaxprs_of(eqn.params):
            if _binds(sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub, prim):
                return True
    return False


# lax special functions that JAX lowers through its own JAX code (series, continued fractions
# and Chebyshev sums in jax/_src/lax/special.py, the port of XLA's math library): the names of
# those implementations, and whether they take the computation dtype.
_SPECIAL_IMPLS = {
    "igamma": ("igamma_impl", True),
    "igammac": ("igammac_impl", True),
    "igamma_grad_a": ("igamma_grad_a_impl", True),
    "regularized_incomplete_beta": ("regularized_incomplete_beta_impl", True),
    "bessel_i0e": ("bessel_i0e_impl", False),
}


def special_impl_jaxpr(eqn: Any) -> Any:
    """A lax special-function equation as the JAX code JAX itself lowers it with (operands
    broadcast to one shape, float16/bfloat16 computed in float32, as JAX does)."""
    from jax._src.lax import special

    name, with_dtype = _SPECIAL_IMPLS[eqn.primitive.name]
    impl = getattr(special, name)
    fn = special._up_and_broadcast(impl) if with_dtype else impl
    return trace_on_data(eqn, fn, [v.aval for v in eqn.invars])


@functools.cache
def digamma_at_zero() -> float:
    """digamma(0) as this JAX version defines it (NaN up to jax 0.10, -inf from 0.11 on)."""
    # on the CPU device (jit(backend=...) is deprecated from JAX 0.12): the value is what
    # the exported model is compared against
    return float(
        jax.lax.digamma(jax.device_put(np.float32(0), jax.local_devices(backend="cpu")[0]))
    )


def callback_function(callback: Any) -> Any | None:
    """The user's Python function behind the ``callback`` param of a pure_callback equation."""
    return getattr(callback, "callback_func", None)


def is_extended_dtype(dtype: Any) -> bool:
    """True for JAX's extended dtypes (typed PRNG keys, ...), which numpy does not know."""
    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


def evaluate_dim(d: Any, sizes: Mapping[str, int], default: int) -> int:
    """A dim (int or symbolic) as an int, symbolic variables taken from ``sizes``."""
    if not is_symbolic_dim(d):
        return int(d)
    total = 0
    for factors, coeff in dim_structure(d):
        term = coeff
        for factor, exponent in factors:
            var = factor_var(factor)
            if var is not None:
                value = sizes.get(var, default)
            else:
                operation, operands = factor_operation(factor)
                a, b = (evaluate_dim(o, sizes, default) for o in operands)
                value = {
                    "floordiv": a // b if b else 0,
                    "mod": a % b if b else 0,
                    "max": max(a, b),
                    "min": min(a, b),
                }[operation]
            term *= value**exponent
        total += term
    return total


# -- values ONNX holds as real data with trailing dims ------------------------------------
# Typed PRNG keys are represented by their uint32 data (trailing dims: the key shape), complex
# numbers by real (real, imag) pairs (one trailing dim of 2). What a key impl does (seed,
# split, fold_in, random_bits) is JAX code in its PRNGImpl (public via
# jax.extend.random.define_prng_impl); only reaching the impl from a key dtype is internal.


def is_complex_dtype(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, np.complexfloating)


def real_dtype(dtype: Any) -> np.dtype:
    """The float dtype of a complex dtype's parts (complex64 -> float32); others unchanged."""
    return np.finfo(dtype).dtype if is_complex_dtype(dtype) else np.dtype(dtype)


def data_dims(dtype: Any) -> tuple[int, ...]:
    """The trailing dims the real data behind one element of ``dtype`` adds: the key shape
    for PRNG keys, (2,) for complex numbers, () for everything else."""
    if is_key_dtype(dtype):
        return key_data_shape(dtype)
    return (2,) if is_complex_dtype(dtype) else ()


def data_struct(aval: Any) -> jax.ShapeDtypeStruct:
    """The real data behind an aval (keys: uint32 words, complex: float pairs); other avals as
    they are."""
    if is_key_dtype(aval.dtype):
        return jax.ShapeDtypeStruct(
            tuple(aval.shape) + key_data_shape(aval.dtype), np.dtype(np.uint32)
        )
    if is_complex_dtype(aval.dtype):
        return jax.ShapeDtypeStruct((*aval.shape, 2), real_dtype(aval.dtype))
    return jax.ShapeDtypeStruct(tuple(aval.shape), aval.dtype)


def held_off_host(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` whose host copy is a copy: on an accelerator, or
    split over several devices (a single CPU device's buffer is viewed, not copied)."""
    if (
        not isinstance(value, jax.Array)
        or isinstance(value, jax.core.Tracer)
        or is_key_dtype(value.dtype)
    ):
        return False
    try:
        devices = value.sharding.device_set
    except Exception:
        return False
    return len(devices) > 1 or any(d.platform != "cpu" for d in devices)  # type: ignore[attr-defined]


def fetched_data(array: Any) -> np.ndarray:
    """:func:`to_data` of a ``jax.Array`` held off the host, copied shard by shard into a
    host array that the ``jax.Array`` does not keep.

    A shard's host value is never read from the array itself: JAX keeps the host copy of any
    array whose value was read (``np.asarray``, ``jax.device_get``, and ``device_put`` to the
    CPU on an accelerator host, where the CPU device is another client and the copy goes
    through the source's ``_value``; jaxlib caches it again in the array's storage), which
    keeps every weight of a model on the host until the export ends (a single-device weight's
    only shard is the weight itself). Each shard is copied on its device first, and the
    copy's host value is read and dropped with it. TPU v5e, ``python3 -m
    benchmarks.device_memory --megabytes 1200``: host peak 1.17x the weight bytes before."""
    shards = [s for s in array.addressable_shards if s.replica_id == 0]  # a replicated block once
    if len(shards) == 1 and tuple(shards[0].data.shape) == tuple(array.shape):
        return to_data(_uncached_host_copy(shards[0]))
    host = np.empty(array.shape, array.dtype)
    for shard in shards:
        host[shard.index] = _uncached_host_copy(shard)
    return to_data(host)


def _uncached_host_copy(shard: Any) -> np.ndarray:
    """A shard's value on the host, read from a copy made on its device (which keeps the host
    copy and is dropped on return) so that the shard's array does not keep it."""
    return np.asarray(jax.device_put(shard.data, shard.device, may_alias=False))


def to_data(value: Any) -> Any:
    """A concrete value as the real data ONNX holds for it (keys: uint32, complex: pairs)."""
    if hasattr(value, "dtype") and is_key_dtype(value.dtype):
        return np.asarray(jax.random.key_data(value))
    value = np.asarray(value)
    if is_complex_dtype(value.dtype):
        return np.stack([value.real, value.imag], axis=-1)
    return value


def _vmapped(f: Any, n: int) -> Any:
    for _ in range(n):
        f = jax.vmap(f)
    return f


def trace_on_data(eqn: Any, fn: Any, avals: list[Any]) -> Any:
    """make_jaxpr of ``fn`` on the real data of ``avals``; its equations keep ``eqn``'s user
    source line (so an unsupported primitive inside is reported where the user wrote it)."""
    with _source_info_util.user_context(eqn.source_info.traceback):
        return jax.make_jaxpr(fn)(*[data_struct(a) for a in avals])


def prng_impl_jaxpr(eqn: Any) -> Any:
    """A PRNG equation (random_seed/bits/split/fold_in) as its key impl's JAX code on key data.

    Mirrors JAX's own lowering: the impl works on one key, vmapped over the key batch dims.
    Config that the impl reads (``jax_threefry_partitionable``) is read now, as JAX does.
    """
    name, params = eqn.primitive.name, eqn.params
    avals_in = [v.aval for v in eqn.invars]
    if name == "random_seed":
        impl = params["impl"]
        fn = _vmapped(impl.seed, len(avals_in[0].shape))
    elif name == "random_bits":
        impl = key_impl(avals_in[0].dtype)
        fn = _vmapped(
            lambda k: impl.random_bits(k, params["bit_width"], params["shape"]),
            len(avals_in[0].shape),
        )
    elif name == "random_split":
        impl = key_impl(avals_in[0].dtype)
        fn = _vmapped(lambda k: impl.split(k, params["shape"]), len(avals_in[0].shape))
    elif name == "random_fold_in":
        impl = key_impl(avals_in[0].dtype)
        shape = tuple(eqn.outvars[0].aval.shape)
        fold_in = _vmapped(impl.fold_in, len(shape))

        def fn(keys: Any, msgs: Any) -> Any:
            keys = jax.numpy.broadcast_to(keys, shape + tuple(impl.key_shape))
            return fold_in(keys, jax.numpy.broadcast_to(msgs, shape))
    else:
        raise ValueError(f"{name} is not a PRNG primitive")
    return trace_on_data(eqn, fn, avals_in)


def data_jaxpr(eqn: Any) -> Any | None:
    """An equation whose outputs are keys (or complex numbers) and that acts on each word of
    the real data independently (slice, reshape, gather, select_n, ...; for complex numbers
    also add, reduce_sum, ...) as the same primitive on that data.

    Each word of the data is an array shaped like the values, so the op is the op vmapped over
    the trailing data dims; JAX's batching rules adjust its params. Operands without data dims
    (indices, predicates) are shared. Returns None when the equation has a sub-jaxpr, outputs
    of another kind, or cannot be traced.
    """
    avals_out = [v.aval for v in eqn.outvars]
    n_data_dims = len(data_dims(avals_out[0].dtype))
    if (
        subjaxprs_of(eqn.params)
        or not n_data_dims
        or any(data_dims(a.dtype) != data_dims(avals_out[0].dtype) for a in avals_out)
    ):
        return None
    avals_in = [v.aval for v in eqn.invars]
    in_axes = [-1 if data_dims(a.dtype) else None for a in avals_in]

    def fn(*args: Any) -> Any:
        out = eqn.primitive.bind(*args, **eqn.params)
        return list(out) if eqn.primitive.multiple_results else out

    for _ in range(n_data_dims):
        fn = jax.vmap(fn, in_axes=in_axes, out_axes=-1)
    try:
        return trace_on_data(eqn, fn, avals_in)
    except Exception:
        return None


def scan_counts(params: dict[str, Any]) -> tuple[int, int]:
    """(num_consts, num_carry) of a scan equation: plain params up to JAX 0.10, ``ft_in`` later."""
    if "ft_in" in params:
        consts, carry, _ = params["ft_in"].unpack()
        return len(consts), len(carry)
    return int(params["num_consts"]), int(params["num_carry"])


# -- primitives whose meaning is a body jaxpr (coarse ops, ONNX function calls) ------------


def hoist_consts(closed: Any) -> tuple[Any, list[Any]]:
    """A closed jaxpr's consts as its leading inputs: (closed jaxpr without consts, consts)."""
    from jax._src.interpreters import partial_eval as pe

    return ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), ()), list(closed.consts)


_BODY_PRIMITIVES: dict[str, Any] = {}
_REBOUND_UNDER_VMAP: set[str] = set()


def rebind_under_vmap(name: str) -> None:
    """Under ``jax.vmap``, bind the body primitive ``name`` again on the batched operands
    (batch dims moved to the front, the body vmapped) instead of inlining its body.

    For primitives whose lowering accepts operands with extra leading (batch) dims, such as a
    coarse op whose rule checks the ranks it models: ``jax.vmap(linear)`` stays one Gemm.
    The re-bound equation has a ``vmap_levels`` param: one tuple per enclosing vmap, outermost
    first, saying which operands carry that vmap's dim (their leading dims, in that order).
    """
    _REBOUND_UNDER_VMAP.add(name)


_BATCHED: BoundedMemo[tuple[Any, Any]] = BoundedMemo(512)


def batched_body(body: Any, in_axes: list[int | None], args: list[Any]) -> Any:
    """``make_jaxpr(vmap(body, in_axes))`` on the avals of ``args`` (outputs batched along
    dim 0), traced once per body, axes, avals and trace context: equal layers under
    ``jax.vmap`` share a body (``core/calls.py``), and so their batched body."""
    try:
        key: Hashable | None = (
            id(body),
            tuple(in_axes),
            tuple(jax.typeof(a) for a in args),
            trace_context(),
        )
        hash(key)
    except TypeError:  # pragma: no cover - an aval that does not hash: traced each time
        key = None
    hit = _BATCHED.get(key)
    if hit is not None and hit[0] is body:
        return hit[1]
    fn = jex.core.jaxpr_as_fun(body)

    def run(*xs: Any) -> Any:  # a function of its own: JAX names it without printing the jaxpr
        return fn(*xs)

    batched = jax.make_jaxpr(jax.vmap(run, in_axes=list(in_axes)))(*args)
    _BATCHED.put(key, (body, batched))  # holding body keeps id(body) unique
    return batched


def clear_batched_bodies() -> None:
    """Forget the batched bodies of :func:`batched_body`."""
    _BATCHED.clear()


def is_body_primitive(prim: Any) -> bool:
    """Whether ``prim`` was made by :func:`body_primitive` (its ``body`` param is its meaning)."""
    return _BODY_PRIMITIVES.get(prim.name) is prim


def body_primitive(name: str) -> Any:
    """A primitive (one per name) whose ``body`` param, a ClosedJaxpr, is what it computes.

    Its implementation, abstract evaluation, batching, JVP and MLIR lowering are those of the
    body, so JAX numerics and transformations are exactly the body's; jvp inlines it, and so
    does vmap unless :func:`rebind_under_vmap` was called for ``name``.
    """
    prim = _BODY_PRIMITIVES.get(name)
    if prim is not None:
        return prim
    from jax._src.interpreters import ad, batching, mlir

    prim = Primitive(name)
    prim.multiple_results = True

    # **_ (here, in abstract_eval and jvp): body is what any body primitive computes; the
    # other params are its binder's (a function call's name / key, a coarse op's roles /
    # config, vmap_levels), named by its lowering rule (tests/core/test_rule_signatures.py)
    def impl(*args: Any, body: Any, **_: Any) -> list[Any]:
        return list(jex.core.jaxpr_as_fun(body)(*args))

    def abstract_eval(*_avals: Any, body: Any, **_: Any) -> list[Any]:
        return list(body.out_avals)

    def batch(args: Any, dims: Any, *, body: Any, **params: Any) -> tuple[list[Any], list[int]]:
        in_axes = [d if isinstance(d, int) else None for d in dims]  # not mapped: None
        if name not in _REBOUND_UNDER_VMAP:
            outs = jex.core.jaxpr_as_fun(batched_body(body, in_axes, args))(*args)
            return list(outs), [0] * len(outs)
        args = [
            a if d is None else jax.numpy.moveaxis(a, d, 0)
            for a, d in zip(args, in_axes, strict=True)
        ]
        front = [None if d is None else 0 for d in in_axes]
        batched = batched_body(body, front, args)
        levels = (tuple(d is not None for d in in_axes), *params.pop("vmap_levels", ()))
        outs = prim.bind(*args, body=batched, vmap_levels=levels, **params)
        return list(outs), [0] * len(outs)

    def jvp(primals: Any, tangents: Any, *, body: Any, **_: Any) -> tuple[list[Any], list[Any]]:
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        outs, out_tangents = jax.jvp(jex.core.jaxpr_as_fun(body), list(primals), tangents)
        return list(outs), list(out_tangents)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    batching.primitive_batchers[prim] = batch
    ad.primitive_jvps[prim] = jvp
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=True))
    _BODY_PRIMITIVES[name] = prim
    return prim


_JAXPR_TEXTS: dict[int, tuple[Any, str]] = {}  # id(closed jaxpr) -> (weak reference to it, text)


def jaxpr_text(closed: Any) -> str:
    """The printed jaxpr: equal texts (and equal input types) compute the same function.

    Printing a layer's jaxpr costs milliseconds; equal layers share one traced body (the
    trace cache of core/calls.py), so each body is printed once while it lives."""
    hit = _JAXPR_TEXTS.get(id(closed))
    if hit is not None and hit[0]() is closed:
        return hit[1]
    text, key = str(closed.jaxpr), id(closed)
    try:
        ref = weakref.ref(closed, lambda _: _JAXPR_TEXTS.pop(key, None))
    except TypeError:  # not weakly referable: printed each time
        return text
    _JAXPR_TEXTS[key] = (ref, text)
    return text


# -- Pallas ------------------------------------------------------------------------------------

# Pallas primitives with no meaning outside the hardware they drive (DMAs, semaphores,
# barriers, the TPU's matmul unit and PRNG): the interpret path has no values for them.
_PALLAS_HARDWARE_MODULES = (
    "jax._src.pallas.mosaic.primitives",
    "jax._src.pallas.mosaic_gpu.primitives",
    "jax._src.pallas.triton.primitives",
)
_PALLAS_HARDWARE_NAMES = (
    "semaphore_read",
    "semaphore_signal",
    "semaphore_wait",
    "get_global",
    "delay",
)


@functools.cache
def _pallas_hardware_primitives() -> frozenset[str]:
    import importlib

    names = set(_PALLAS_HARDWARE_NAMES)
    for module_name in _PALLAS_HARDWARE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        names.update(v.name for v in vars(module).values() if isinstance(v, Primitive))
    return frozenset(names)


def pallas_hardware_primitives(params: dict[str, Any]) -> list[str]:
    """The hardware-only primitives a ``pallas_call``'s kernel uses, nested bodies included."""
    found: list[str] = []

    def walk(jaxpr: Any) -> None:
        for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
            if (
                eqn.primitive.name in _pallas_hardware_primitives()
                and eqn.primitive.name not in found
            ):
                found.append(eqn.primitive.name)
            for sub in subjaxprs_of(eqn.params):
                walk(sub)

    walk(params["jaxpr"])
    return found


def pallas_kernel_name(params: dict[str, Any]) -> str:
    """The kernel's name and definition site (``matmul_kernel at model.py:12``) as JAX knows it."""
    info = getattr(params["jaxpr"], "debug_info", None)
    where = getattr(info, "func_src_info", None) or ""
    name = params.get("name") or (where.split(" ")[0] if where else "kernel")
    return f"{name} ({where})" if where and not where.startswith(name + " ") else (where or name)


def pallas_interpreter(params: dict[str, Any]) -> Any:
    """The function of the ``pallas_call``'s operands that JAX's interpret mode evaluates: the
    kernel's discharged jaxpr (loads and stores as slices and updates) run over the grid in a
    while loop, the outputs carried from one grid step to the next."""
    from jax._src.pallas import hlo_interpreter

    kept = set(inspect.signature(hlo_interpreter.pallas_call_hlo_interpret).parameters)
    return functools.partial(
        hlo_interpreter.pallas_call_hlo_interpret, **{k: v for k, v in params.items() if k in kept}
    )
