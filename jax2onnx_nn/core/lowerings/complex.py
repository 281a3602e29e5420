"""Complex arithmetic on (real, imag) pairs: one JAX function per primitive (``core/complex.py``
says how they are used). Each follows what XLA computes, so that results agree with JAX also
for infinite and NaN parts where XLA defines them (division, abs, sqrt, exp fix-ups below).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.complex import pair_impl

Array = Any


def _parts(x: Array, aval: Any) -> tuple[Array, Array | None]:
    """(real, imag) of an operand; imag is None for a real operand."""
    if jxi.is_complex_dtype(aval.dtype):
        return x[..., 0], x[..., 1]
    return x, None


def _pair(re: Array, im: Array) -> Array:
    re, im = jnp.broadcast_arrays(re, im)
    return jnp.stack([re, im.astype(re.dtype)], axis=-1)


def _mul(ar: Array, ai: Array, br: Array, bi: Array) -> tuple[Array, Array]:
    return ar * br - ai * bi, ar * bi + ai * br


def _div(ar: Array, ai: Array, br: Array, bi: Array) -> tuple[Array, Array]:
    """Smith's division (no overflow of |b|^2), with C99 Annex G's fix-ups for a zero or an
    infinite divisor, as XLA does."""
    big_re = jnp.abs(br) >= jnp.abs(bi)
    ratio = jnp.where(big_re, bi / br, br / bi)
    denom = jnp.where(big_re, br + bi * ratio, bi + br * ratio)
    re = jnp.where(big_re, ar + ai * ratio, ar * ratio + ai) / denom
    im = jnp.where(big_re, ai - ar * ratio, ai * ratio - ar) / denom
    # C99 Annex G: where Smith's formula gives NaN for both parts, the fix-ups below
    both_nan = jnp.isnan(re) & jnp.isnan(im)
    zero_den = (br == 0) & (bi == 0) & both_nan
    inf = jnp.array(np.inf, ar.dtype)
    negative = (br < 0) | ((br == 0) & (1 / br < 0))  # signbit without a bitcast
    signed_inf = jnp.where(negative, -inf, inf)
    re = jnp.where(zero_den, signed_inf * ar, re)
    im = jnp.where(zero_den, signed_inf * ai, im)

    def unit(v: Array) -> Array:  # +-1 for an infinite part, 0 for a finite (or NaN) one
        return jnp.where(jnp.isinf(v), jnp.sign(v), jnp.zeros_like(v))

    finite_num, finite_den = (
        jnp.isfinite(ar) & jnp.isfinite(ai),
        jnp.isfinite(br) & jnp.isfinite(bi),
    )
    inf_den = (jnp.isinf(br) | jnp.isinf(bi)) & finite_num & both_nan
    re = jnp.where(inf_den, 0 * (ar * unit(br) + ai * unit(bi)), re)
    im = jnp.where(inf_den, 0 * (ai * unit(br) - ar * unit(bi)), im)
    inf_num = (jnp.isinf(ar) | jnp.isinf(ai)) & finite_den & both_nan & ~zero_den
    re = jnp.where(inf_num, inf * (unit(ar) * br + unit(ai) * bi), re)
    im = jnp.where(inf_num, inf * (unit(ai) * br - unit(ar) * bi), im)
    return re, im


@functools.cache
def _abs_of_inf_nan_is_inf() -> bool:
    """Whether XLA's abs(inf + nan i) is inf (C99; jax 0.12) or NaN (jax 0.10): asked of JAX."""
    with jax.ensure_compile_time_eval():
        return bool(np.isinf(jnp.abs(jnp.array(complex(np.inf, np.nan), np.complex64))))


def _abs(re: Array, im: Array) -> Array:
    """hypot without overflow: max * sqrt(1 + (min/max)^2); inf and NaN parts as in XLA."""
    a, b = jnp.abs(re), jnp.abs(im)
    big, small = jnp.maximum(a, b), jnp.minimum(a, b)
    ratio = small / jnp.where(big == 0, 1, big)
    result = big * jnp.sqrt(1 + ratio * ratio)
    nan, inf = jnp.isnan(a) | jnp.isnan(b), jnp.isinf(a) | jnp.isinf(b)
    if _abs_of_inf_nan_is_inf():
        return jnp.where(inf, jnp.inf, jnp.where(nan, jnp.nan, result))
    return jnp.where(nan, jnp.nan, jnp.where(inf, jnp.inf, result))


def _exp(re: Array, im: Array) -> tuple[Array, Array]:
    scale = jnp.exp(re)
    # exp(x + 0i) = exp(x) + 0i exactly, also for x = inf (where inf * sin(0) would be NaN)
    return scale * jnp.cos(im), jnp.where(im == 0, im, scale * jnp.sin(im))


def _log(re: Array, im: Array) -> tuple[Array, Array]:
    return jnp.log(_abs(re, im)), lax.atan2(im, re)


def _sqrt(re: Array, im: Array) -> tuple[Array, Array]:
    """The principal root from t = sqrt((|re| + |z|) / 2) (no cancellation); the imaginary part
    takes its sign from ``im < 0`` (XLA gives sqrt(-1 - 0i) = +i)."""
    t = jnp.sqrt(0.5 * jnp.abs(re) + 0.5 * _abs(re, im))
    half = im / (2 * jnp.where(t == 0, 1, t))
    signed_t = jnp.where(im < 0, -t, t)
    out_re = jnp.where(re >= 0, t, jnp.abs(half))
    out_im = jnp.where(re >= 0, half, signed_t)
    inf_im = jnp.isinf(im)
    return jnp.where(inf_im, jnp.inf, out_re), jnp.where(inf_im, im, out_im)


def _like_pairs(fn: Any, nan_in_nan_out: bool = False) -> Any:
    """A (re, im) -> (re, im) function as a pair impl of a unary complex primitive;
    ``nan_in_nan_out``: a NaN part makes both parts NaN (XLA's log and sqrt)."""

    def impl(
        x: Array, *, avals_in: list[Any], avals_out: list[Any], accuracy: object = None
    ) -> Array:
        del avals_in, avals_out  # x is a pair (trailing dim 2)
        del accuracy  # (exp, log, sin, ...) XLA's speed/accuracy hint: jnp has no such knob
        re, im = fn(x[..., 0], x[..., 1])
        if nan_in_nan_out:
            nan = jnp.isnan(x[..., 0]) | jnp.isnan(x[..., 1])
            re, im = jnp.where(nan, jnp.nan, re), jnp.where(nan, jnp.nan, im)
        return _pair(re, im)

    return impl


pair_impl("exp")(_like_pairs(_exp))
pair_impl("log")(_like_pairs(_log, nan_in_nan_out=True))
pair_impl("sqrt")(_like_pairs(_sqrt, nan_in_nan_out=True))


@pair_impl("complex")
def _complex(re: Array, im: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # re and im are real arrays
    return _pair(re, im)


@pair_impl("real")
def _real(x: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return x[..., 0]


@pair_impl("imag")
def _imag(x: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return x[..., 1]


@pair_impl("conj")
def _conj(x: Array, *, input_dtype: Any, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del input_dtype, avals_out  # the operand's dtype: avals_in[0]'s
    re, im = _parts(x, avals_in[0])
    return _pair(re, jnp.zeros_like(re) if im is None else -im)


@pair_impl("abs")
def _abs_impl(x: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return _abs(x[..., 0], x[..., 1])


@pair_impl("sign")
def _sign(x: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    re, im = x[..., 0], x[..., 1]
    magnitude = _abs(re, im)
    zero = magnitude == 0
    safe = jnp.where(zero, 1, magnitude)
    return _pair(jnp.where(zero, re, re / safe), jnp.where(zero, im, im / safe))


@pair_impl("mul")
def _mul_impl(
    x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any], out_dtype: object = None
) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    del out_dtype  # the result's dtype: the operands' (the output aval's)
    return _pair(*_mul(x[..., 0], x[..., 1], y[..., 0], y[..., 1]))


@pair_impl("div")
def _div_impl(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return _pair(*_div(x[..., 0], x[..., 1], y[..., 0], y[..., 1]))


@pair_impl("eq")
def _eq(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return (x[..., 0] == y[..., 0]) & (x[..., 1] == y[..., 1])


@pair_impl("ne")
def _ne(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return (x[..., 0] != y[..., 0]) | (x[..., 1] != y[..., 1])


@pair_impl("integer_pow")
def _integer_pow(x: Array, *, y: int, avals_in: list[Any], avals_out: list[Any]) -> Array:
    """Square-and-multiply in the order of JAX's own lowering (so rounding and the inf/NaN
    parts of the result are JAX's), then one division for a negative power."""
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    re, im = x[..., 0], x[..., 1]
    if y == 0:
        return _pair(jnp.ones_like(re), jnp.zeros_like(im))
    n = abs(y)
    acc = None
    while n > 0:
        if n & 1:
            acc = (re, im) if acc is None else _mul(*acc, re, im)
        n >>= 1
        if n > 0:
            re, im = _mul(re, im, re, im)
    assert acc is not None
    if y < 0:
        acc = _div(jnp.ones_like(acc[0]), jnp.zeros_like(acc[1]), *acc)
    return _pair(*acc)


@pair_impl("pow")
def _pow(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    """x ** y = exp(y log x); x ** 0 is 1 for every x and 0 ** y is 0 for real y > 0, as in
    XLA (other infinite or NaN parts may differ from XLA's special cases)."""
    del avals_out  # the result is complex: a pair
    xr, xi = _parts(x, avals_in[0])
    yr, yi = _parts(y, avals_in[1])
    yr = yr.astype(xr.dtype)
    yi = jnp.zeros_like(yr) if yi is None else yi
    lr, li = _log(xr, xi)
    re, im = _exp(*_mul(yr, yi, lr, li))
    x_zero = (xr == 0) & (xi == 0)
    y_zero = (yr == 0) & (yi == 0)
    zero_power = x_zero & (yr > 0) & (yi == 0)
    re = jnp.where(y_zero, 1, jnp.where(zero_power, 0, re))
    im = jnp.where(y_zero | zero_power, 0, im)
    return _pair(re, im)


@pair_impl("convert_element_type")
def _convert_element_type(
    x: Array,
    *,
    avals_in: list[Any],
    avals_out: list[Any],
    new_dtype: Any,
    weak_type: bool,
    sharding: object,
) -> Array:
    """To complex: (x, 0); complex to complex: both parts cast; to real: the real part (as
    JAX does, with its ComplexWarning); to bool: re != 0 or im != 0."""
    del weak_type  # a Python scalar's type promotion: the traced result's aval has it
    del sharding  # where the result lives on a mesh: one device here
    re, im = _parts(x, avals_in[0])
    out = np.dtype(avals_out[0].dtype)
    if jxi.is_complex_dtype(out):
        part = jxi.real_dtype(out)
        return _pair(re.astype(part), jnp.zeros(re.shape, part) if im is None else im.astype(part))
    if out == np.bool_:
        return (re != 0) | (im != 0)
    return re.astype(out)


def _real_params(params: dict[str, Any]) -> dict[str, Any]:
    """Params of a dot/conv with a complex ``preferred_element_type`` made real."""
    preferred = params.get("preferred_element_type")
    if preferred is not None and jxi.is_complex_dtype(preferred):
        params = {**params, "preferred_element_type": jxi.real_dtype(preferred)}
    return params


def _bilinear(op: Any, x: Array, y: Array, avals_in: list[Any], params: dict[str, Any]) -> Array:
    """A bilinear op (dot_general, conv) on complex operands: four real ops (fewer when one
    operand is real). Exact: no Gauss 3-product trick, whose cancellation loses digits."""
    xr, xi = _parts(x, avals_in[0])
    yr, yi = _parts(y, avals_in[1])
    params = _real_params(params)

    def apply(a: Array, b: Array) -> Array:
        return op(a, b, **params)

    re = apply(xr, yr)
    if xi is not None and yi is not None:
        return _pair(re - apply(xi, yi), apply(xr, yi) + apply(xi, yr))
    return _pair(re, apply(xr, yi) if xi is None else apply(xi, yr))


@pair_impl("dot_general")
def _dot_general(
    x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any], **params: Any
) -> Array:
    del avals_out  # implied by the operands
    return _bilinear(lax.dot_general_p.bind, x, y, avals_in, params)


@pair_impl("conv_general_dilated")
def _conv(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any], **params: Any) -> Array:
    del avals_out
    return _bilinear(lax.conv_general_dilated_p.bind, x, y, avals_in, params)


@pair_impl("reduce_prod")
def _reduce_prod(
    x: Array,
    *,
    axes: tuple[int, ...],
    avals_in: list[Any],
    avals_out: list[Any],
    out_sharding: object = None,
) -> Array:
    """Products of halves until one element is left (static sizes)."""
    del avals_out  # the result is a pair
    del out_sharding  # (JAX 0.12) where the result lives on a mesh: one device here
    re, im = x[..., 0], x[..., 1]
    keep = [d for d in range(re.ndim) if d not in axes]
    shape = [re.shape[d] for d in keep]
    if any(jxi.is_symbolic_dim(re.shape[d]) for d in axes):
        raise NotImplementedError("reduce_prod of complex numbers over a symbolic dim")
    size = int(np.prod([re.shape[d] for d in axes], dtype=np.int64))
    re = jnp.transpose(re, [*keep, *axes]).reshape(*shape, size)
    im = jnp.transpose(im, [*keep, *axes]).reshape(*shape, size)
    if size == 0:
        return _pair(jnp.ones(shape, re.dtype), jnp.zeros(shape, re.dtype))
    while re.shape[-1] > 1:
        n = re.shape[-1]
        if n % 2:
            pad = [(0, 0)] * (re.ndim - 1) + [(0, 1)]
            re, im = jnp.pad(re, pad, constant_values=1), jnp.pad(im, pad)
            n += 1
        re, im = _mul(re[..., : n // 2], im[..., : n // 2], re[..., n // 2 :], im[..., n // 2 :])
    return _pair(re[..., 0], im[..., 0])


# Trigonometric and hyperbolic functions from the real ones of the parts (each lowered by its
# real rule): sin(a + ib) = sin a cosh b + i cos a sinh b, and the like.
def _sinh(re: Array, im: Array) -> tuple[Array, Array]:
    return _real_times(jnp.sinh(re), jnp.cos(im), im), _real_times(jnp.cosh(re), jnp.sin(im), im)


def _cosh(re: Array, im: Array) -> tuple[Array, Array]:
    return _real_times(jnp.cosh(re), jnp.cos(im), im), _real_times(jnp.sinh(re), jnp.sin(im), im)


def _real_times(scale: Array, factor: Array, im: Array) -> Array:
    """``scale * factor`` where ``factor`` comes from the imaginary part ``im``: for a real
    argument (``im == 0``) the product keeps ``factor``'s exact 0 or 1 also when ``scale`` is
    infinite (cosh(inf + 0i) = inf + 0i, not inf + NaN i)."""
    return jnp.where(im == 0, jnp.where(factor == 0, factor, scale * factor), scale * factor)


def _times_i(fn: Any) -> Any:
    """f(z) = -i g(iz) for g = ``fn``: sin from sinh, tan from tanh."""

    def rotated(re: Array, im: Array) -> tuple[Array, Array]:
        out_re, out_im = fn(-im, re)
        return out_im, -out_re

    return rotated


def _cos(re: Array, im: Array) -> tuple[Array, Array]:
    return _cosh(-im, re)  # cos z = cosh(iz)


def _tanh(re: Array, im: Array) -> tuple[Array, Array]:
    """Kahan's formula: with t = tan b, s = sinh a, c = cosh a: tanh(a + ib) =
    (c s (1 + t^2) + i t) / (1 + s^2 (1 + t^2)); for |a| > 20 (where the float result is
    +-1 + tiny i) the limit sign(a) + 4 i sin b cos b exp(-2|a|)."""
    t, s = jnp.tan(im), jnp.sinh(re)
    beta = 1 + t * t
    denom = 1 + beta * s * s
    out_re, out_im = beta * jnp.cosh(re) * s / denom, t / denom
    big = jnp.abs(re) > 20
    tail = 4 * jnp.sin(im) * jnp.cos(im) * jnp.exp(-2 * jnp.abs(jnp.where(big, re, 0)))
    # at re = +-inf an infinite or NaN im still gives +-1 + 0i (XLA's choice), a real
    # argument keeps im = +-0 exactly, and NaN stays NaN otherwise
    finite_im = jnp.isfinite(im)
    big_re = jnp.where(finite_im | jnp.isinf(re), jnp.sign(re), jnp.nan)
    big_im = jnp.where(finite_im, tail, jnp.where(jnp.isinf(re), 0, jnp.nan))
    out_re, out_im = jnp.where(big, big_re, out_re), jnp.where(big, big_im, out_im)
    return out_re, jnp.where(im == 0, im, out_im)


def _expm1(re: Array, im: Array) -> tuple[Array, Array]:
    """exp(z) - 1 without cancellation near 0: cos b - 1 = -2 sin^2(b/2)."""
    half = jnp.sin(im / 2)
    return jnp.expm1(re) * jnp.cos(im) - 2 * half * half, jnp.where(
        im == 0, im, jnp.exp(re) * jnp.sin(im)
    )


def _log1p(re: Array, im: Array) -> tuple[Array, Array]:
    """log(1 + z): 0.5 log1p(a (2 + a) + b^2) where that sum is small (no cancellation near
    z = 0), log |1 + z| elsewhere (no overflow)."""
    small_sum = re * (2 + re) + im * im
    near = jnp.abs(small_sum) < 0.5
    magnitude = jnp.where(
        near, 0.5 * jnp.log1p(jnp.where(near, small_sum, 0)), jnp.log(_abs(1 + re, im))
    )
    # an infinite and a NaN part: the real part is inf in jax 0.10, NaN in jax 0.12
    inf_nan = (jnp.isinf(re) | jnp.isinf(im)) & (jnp.isnan(re) | jnp.isnan(im))
    magnitude = jnp.where(inf_nan, jnp.inf if _log1p_of_inf_nan_is_inf() else jnp.nan, magnitude)
    return magnitude, lax.atan2(im, 1 + re)


@functools.cache
def _log1p_of_inf_nan_is_inf() -> bool:
    """Whether XLA's log1p(inf + nan i) has an infinite real part: asked of JAX."""
    with jax.ensure_compile_time_eval():
        return bool(np.isinf(jnp.log1p(jnp.array(complex(np.inf, np.nan), np.complex64)).real))


def _exp2(re: Array, im: Array) -> tuple[Array, Array]:
    """exp(z * (ln 2 + 0i)), a complex product as in JAX's lowering (so exp2(inf + 0i) is
    NaN + NaN i as there: inf * 0 in the product)."""
    ln2 = float(np.log(2))
    return _exp(*_mul(re, im, jnp.full_like(re, ln2), jnp.zeros_like(im)))


def _log2(re: Array, im: Array) -> tuple[Array, Array]:
    out_re, out_im = _log(re, im)  # log z / ln 2, each part, as JAX's lowering
    ln2 = float(np.log(2))
    return out_re / ln2, out_im / ln2


@pair_impl("square")
def _square(x: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    return _pair(*_mul(x[..., 0], x[..., 1], x[..., 0], x[..., 1]))


for _name, _fn in {
    "sinh": _sinh,
    "cosh": _cosh,
    "tanh": _tanh,
    "sin": _times_i(_sinh),
    "cos": _cos,
    "tan": _times_i(_tanh),
    "expm1": _expm1,
    "log1p": _log1p,
    "exp2": _exp2,
}.items():
    pair_impl(_name)(_like_pairs(_fn))
pair_impl("log2")(_like_pairs(_log2, nan_in_nan_out=True))


# Ordering: JAX orders complex numbers lexicographically by (real, imag).
def _lex_greater(xr: Array, xi: Array, yr: Array, yi: Array) -> Array:
    return (xr > yr) | ((xr == yr) & (xi > yi))


@pair_impl("max")
def _max(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    """XLA's select(x > y, x, y) with the lexicographic order: a NaN comparison is false, so
    y is picked, as in JAX."""
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    x, y = jnp.broadcast_arrays(x, y)
    pick_x = _lex_greater(x[..., 0], x[..., 1], y[..., 0], y[..., 1])
    return jnp.where(pick_x[..., None], x, y)


@pair_impl("min")
def _min(x: Array, y: Array, *, avals_in: list[Any], avals_out: list[Any]) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    x, y = jnp.broadcast_arrays(x, y)
    pick_x = _lex_greater(y[..., 0], y[..., 1], x[..., 0], x[..., 1])
    return jnp.where(pick_x[..., None], x, y)


def _lex_extreme(x: Array, axes: tuple[int, ...], largest: bool) -> Array:
    """The lexicographically largest (smallest) pair over ``axes``: the largest real part,
    then the largest imaginary part among those, and of the elements equal to both the last
    one (XLA's fold keeps the later of equal elements: its signed zeros are kept)."""
    sign = 1 if largest else -1
    re, im = sign * x[..., 0], sign * x[..., 1]
    best_re = jnp.max(re, axis=axes, keepdims=True)
    on_best = re == best_re
    best_im = jnp.max(jnp.where(on_best, im, -jnp.inf), axis=axes, keepdims=True)
    hit = on_best & (im == best_im)
    keep = [d for d in range(re.ndim) if d not in axes]
    flat = jnp.transpose(hit, [*keep, *axes]).reshape(*[re.shape[d] for d in keep], -1)
    last = flat.shape[-1] - 1 - jnp.argmax(flat[..., ::-1], axis=-1)
    values = jnp.transpose(x, [*keep, *axes, x.ndim - 1]).reshape(*flat.shape, 2)
    return jnp.take_along_axis(values, last[..., None, None], axis=-2)[..., 0, :]


@pair_impl("reduce_max")
def _reduce_max(
    x: Array,
    *,
    axes: tuple[int, ...],
    avals_in: list[Any],
    avals_out: list[Any],
    out_sharding: object = None,
) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    del out_sharding  # (JAX 0.12) where the result lives on a mesh: one device here
    return _lex_extreme(x, tuple(axes), largest=True)


@pair_impl("reduce_min")
def _reduce_min(
    x: Array,
    *,
    axes: tuple[int, ...],
    avals_in: list[Any],
    avals_out: list[Any],
    out_sharding: object = None,
) -> Array:
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    del out_sharding  # (JAX 0.12) where the result lives on a mesh: one device here
    return _lex_extreme(x, tuple(axes), largest=False)


@pair_impl("sort")
def _sort(
    *operands: Array,
    dimension: int,
    is_stable: bool,
    num_keys: int,
    avals_in: list[Any],
    avals_out: list[Any],
) -> Any:
    """A complex key is two keys, real then imaginary part, as in JAX's own comparator; a
    complex operand that is not a key travels as its two parts."""
    del avals_out  # the results are the operands': avals_in
    parts: list[Array] = []
    keys = 0
    for index, (operand, aval) in enumerate(zip(operands, avals_in, strict=True)):
        re, im = _parts(operand, aval)
        split = [re] if im is None else [re, im]
        parts += split
        keys += len(split) if index < num_keys else 0
    out = lax.sort_p.bind(*parts, dimension=dimension, is_stable=is_stable, num_keys=keys)
    results, at = [], 0
    for aval in avals_in:
        if jxi.is_complex_dtype(aval.dtype):
            results.append(_pair(out[at], out[at + 1]))
            at += 2
        else:
            results.append(out[at])
            at += 1
    return results


def _complex_mul(a: Array, b: Array) -> Array:
    return _pair(*_mul(a[..., 0], a[..., 1], b[..., 0], b[..., 1]))


@pair_impl("cumprod")
def _cumprod(
    x: Array, *, axis: int, reverse: bool, avals_in: list[Any], avals_out: list[Any]
) -> Array:
    """An associative scan of complex products (static sizes). JAX lowers cumprod to a
    reduce_window whose padding is the init 1 + 0i: every prefix but the full one is also
    multiplied by it, which turns infinite parts into NaN (inf * 0) as in JAX."""
    del avals_in, avals_out  # every operand is a pair (trailing dim 2)
    n = x.shape[axis]
    if jxi.is_symbolic_dim(n):
        raise NotImplementedError("cumprod of complex numbers over a symbolic dim")
    prefixes = lax.associative_scan(_complex_mul, x, reverse=reverse, axis=axis)
    padded = (jnp.arange(n) != (0 if reverse else n - 1)).reshape(
        [-1 if d == axis else 1 for d in range(x.ndim)]
    )
    return jnp.where(
        padded,
        _complex_mul(prefixes, _pair(jnp.ones_like(x[..., 0]), jnp.zeros_like(x[..., 1]))),
        prefixes,
    )


# Inverse trigonometric and hyperbolic functions. asin, acos, asinh and acosh share one kernel
# (Hull et al.'s algorithm with the fewer regions XLA uses); atan and atanh one formula for
# atanh. Each keeps JAX's signs of zero on the branch cuts and its finite results far out.
def _asin_acos_kernel(re: Array, im: Array) -> tuple[Array, Array]:
    """(sqrt(a^2 - x^2), log(a + sqrt(a^2 - 1))) for x = |re|, y = |im| and
    a = (|z + 1| + |z - 1|) / 2: then asin z = atan2(re, k_re) + i sign(im) k_im.

    Every difference that would cancel (a - x near the cut, a - 1 near the branch points) is
    rewritten as a quotient of sums (Hull et al., Fig. 2); far out (beyond sqrt(max) / 8) the
    asymptotes: k_re = y, k_im = log 2 + log max(x, y) (+ a log1p correction in x / y)."""
    x, y = jnp.abs(re), jnp.abs(im)
    info = np.finfo(re.dtype)
    safe_min = float(np.sqrt(info.tiny)) * 4
    safe_max = float(np.sqrt(info.max)) / 8
    # y large enough that the imaginary part is its asymptote; a lower bound while x is not
    # huge extends the asymptote's region to where x ~ eps * y (Hull et al.'s case 4)
    huge_y_bound = jnp.where(x < safe_max * 1e12, safe_max * 1e-6, safe_max * 1e2).astype(re.dtype)
    xp1, xm1 = x + 1, x - 1
    r, s = _abs(xp1, y), _abs(xm1, y)  # |z + 1|, |z - 1|
    a = 0.5 * (r + s)
    rpxp1, spxm1, smxm1 = r + xp1, s + xm1, s - xm1
    yy = y * y
    half_apx = 0.5 * (a + x)
    out_re = jnp.where(
        jnp.maximum(x, y) >= safe_max,
        y,
        jnp.where(
            x <= 1,
            jnp.sqrt(half_apx * (yy / rpxp1 + smxm1)),
            y * jnp.sqrt(half_apx / rpxp1 + half_apx / spxm1),
        ),
    )
    tiny_y = (y < safe_min) & (x < 1)
    am1 = jnp.where(  # a - 1 without cancellation
        tiny_y,
        -(xp1 * xm1) / (a + 1),
        jnp.where(
            x >= 1,
            0.5 * yy / rpxp1 + 0.5 * spxm1,
            jnp.where(a <= 1.5, 0.5 * yy / rpxp1 + 0.5 * yy / smxm1, a - 1),
        ),
    )
    huge_y = y >= huge_y_bound
    big = jnp.where(huge_y, y, x)
    root = jnp.sqrt(am1 * (a + 1))
    x_over_y = jnp.where(huge_y & (y != np.inf), x / y, 0)
    out_im = jnp.where(
        big >= jnp.where(huge_y, huge_y_bound, safe_max),
        float(np.log(2)) + jnp.log(big) + 0.5 * jnp.log1p(x_over_y * x_over_y),
        jnp.where(tiny_y, y / root, jnp.log1p(am1 + root)),
    )
    return out_re, out_im


def _asin(re: Array, im: Array) -> tuple[Array, Array]:
    k_re, k_im = _asin_acos_kernel(re, im)
    return lax.atan2(re, k_re), jnp.where(im < 0, -k_im, k_im)


def _acos(re: Array, im: Array) -> tuple[Array, Array]:
    k_re, k_im = _asin_acos_kernel(re, im)
    return lax.atan2(k_re, re), jnp.where(im < 0, k_im, -k_im)


def _asinh(re: Array, im: Array) -> tuple[Array, Array]:
    k_re, k_im = _asin_acos_kernel(-im, re)  # asinh z = -i asin(iz)
    return jnp.where(re < 0, -k_im, k_im), lax.atan2(im, k_re)


def _acosh(re: Array, im: Array) -> tuple[Array, Array]:
    k_re, k_im = _asin_acos_kernel(re, im)  # acosh z = +-i acos z
    angle = lax.atan2(k_re, re)
    return k_im, jnp.where(im < 0, -angle, angle)


def _atanh(re: Array, im: Array) -> tuple[Array, Array]:
    """atanh z = (log1p z - log1p(-z)) / 2 as real formulas: re = sign(x) log1p(4|x| / ((1 -
    |x|)^2 + y^2)) / 4 and im = atan2(2y, (1 - |x|)(1 + |x|) - y^2) / 2; beyond
    1 / eps^2 (where 1 + |x| rounds to |x|) their asymptotes, so nothing overflows."""
    x, y = jnp.abs(re), jnp.abs(im)
    dtype = np.dtype(re.dtype)
    inv_eps = float(np.nextafter(dtype.type(1 / np.finfo(dtype).epsneg), dtype.type(np.inf)))
    safe_max = inv_eps * inv_eps
    one_minus_x = 1 - x
    yy = im * im
    inside = (x < safe_max) & (y < safe_max)
    far = jnp.where(jnp.isinf(re) | jnp.isinf(im), 0, 1 / (x / im + im / x) / im)
    arg = jnp.where(
        inside, x / (one_minus_x * one_minus_x + yy), jnp.where(y * inv_eps < x, 1 / x, far)
    )
    sign_x = jnp.where(re >= 0, 1, -1).astype(re.dtype)
    sign_y = jnp.where(im >= 0, 1, -1).astype(re.dtype)
    out_re = sign_x * jnp.log1p(4 * arg) * 0.25
    out_im = jnp.where(inside, lax.atan2(im + im, one_minus_x * (1 + x) - yy), sign_y * np.pi) * 0.5
    return out_re, out_im


def _atan(re: Array, im: Array) -> tuple[Array, Array]:
    out_re, out_im = _atanh(-im, re)  # atan z = -i atanh(iz)
    return out_im, -out_re


for _name, _fn in {
    "asin": _asin,
    "acos": _acos,
    "asinh": _asinh,
    "acosh": _acosh,
    "atanh": _atanh,
    "atan": _atan,
}.items():
    pair_impl(_name)(_like_pairs(_fn))
