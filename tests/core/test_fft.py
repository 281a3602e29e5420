"""lax.fft and jnp.fft through onnxruntime: lengths 1..33 (primes, powers of two and neither),
n= padding/truncation, norm= modes, 1-3 axes, symbolic batch and length dims, float32 and
float64. Tolerance: 1e-5 (float32) / 1e-12 (float64) of the spectrum's largest magnitude."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.lowerings.fft import FFT, IFFT, IRFFT, RFFT, dft_matrix
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.strategies import complex_numbers

ONE_AXIS = {
    "fft": jnp.fft.fft,
    "ifft": jnp.fft.ifft,
    "rfft": jnp.fft.rfft,
    "irfft": jnp.fft.irfft,
    "hfft": jnp.fft.hfft,
    "ihfft": jnp.fft.ihfft,
}
MANY_AXES = {
    "fft2": jnp.fft.fft2,
    "ifft2": jnp.fft.ifft2,
    "rfft2": jnp.fft.rfft2,
    "irfft2": jnp.fft.irfft2,
    "fftn": jnp.fft.fftn,
    "ifftn": jnp.fft.ifftn,
    "rfftn": jnp.fft.rfftn,
    "irfftn": jnp.fft.irfftn,
}
REAL_INPUT = {"rfft", "ihfft", "rfft2", "rfftn"}
NORMS = [None, "backward", "ortho", "forward"]


def _params(names, default):
    """All names, those not in ``default`` marked slow (the default run stays in budget)."""
    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in sorted(names)]


def _values(data, name, shape, x64):
    if name in REAL_INPUT:
        dtype = np.float64 if x64 else np.float32
        return data.draw(
            hnp.arrays(dtype, shape, elements=st.floats(-100, 100, width=np.finfo(dtype).bits))
        )
    dtype = np.complex128 if x64 else np.complex64
    return data.draw(
        hnp.arrays(dtype, shape, elements=complex_numbers(dtype, min_value=-100, max_value=100))
    )


def _assert_spectrum_matches(fn, x, x64):
    scale = float(np.max(np.abs(np.asarray(fn(jnp.asarray(x)))), initial=1.0))
    tol = 1e-12 if x64 else 1e-5
    assert_exports_match_on(fn, x, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("name", _params(ONE_AXIS, {"fft", "rfft", "irfft"}))
@given(data=st.data(), length=st.integers(1, 33), x64=st.booleans(), norm=st.sampled_from(NORMS))
def test_one_axis(name, data, length, x64, norm):
    rows = data.draw(st.integers(0, 3))
    n = data.draw(st.none() | st.integers(1, 33))  # n=: zero padding or truncation
    if name in ("irfft", "hfft") and n is None and length == 1:
        n = 1  # the default output length 2 * (1 - 1) = 0 is refused by JAX
    fn = lambda v: ONE_AXIS[name](v, n=n, norm=norm)  # noqa: E731
    _assert_spectrum_matches(fn, _values(data, name, (rows, length), x64), x64)


@pytest.mark.parametrize("name", _params(MANY_AXES, {"ifft2", "irfftn", "rfftn"}))
@given(data=st.data(), x64=st.booleans(), norm=st.sampled_from(NORMS))
def test_many_axes(name, data, x64, norm):
    rank = 2 if name.endswith("2") else data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank)))
    if name.startswith("irfft"):
        shape = (*shape[:-1], max(shape[-1], 2))  # default output length 2 * (m - 1) > 0
    fn = lambda v: MANY_AXES[name](v, norm=norm)  # noqa: E731
    _assert_spectrum_matches(fn, _values(data, name, (2, *shape), x64), x64)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize(
    "name",
    _params(["fft", "ifft", "rfft", "irfft", "rfft2", "irfft2"], {"ifft", "rfft2", "irfft2"}),
)
def test_symbolic_batch_and_length(name, x64):
    fn = {**ONE_AXIS, **MANY_AXES}[name]
    real = np.float64 if x64 else np.float32
    dtype = real if name in REAL_INPUT else (np.complex128 if x64 else np.complex64)
    model = assert_exports_match(
        fn,
        [(("B", 3, "N"), np.dtype(dtype).name)],
        sizes={"B": [1, 2], "N": [2, 16, 9, 33]},
        constraints=("N >= 2",),
        enable_double_precision=x64,
        rtol=1e-12 if x64 else 1e-5,
        atol=1e-10 if x64 else 1e-4,
    )
    assert "DFT" in {n.op_type for n in model.graph.node}  # a symbolic length is an ONNX DFT


@pytest.mark.parametrize("opset", [13, 16])
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize(
    "name", _params(["fft", "ifft", "rfft", "irfft", "rfft2", "irfft2", "hfft"], {"fft", "irfft"})
)
def test_symbolic_length_below_opset_17_is_a_matrix_built_at_run_time(name, x64, opset):
    # no DFT before opset 17: the cos/sin matrices come from the length at run time, in float64
    fn = {**ONE_AXIS, **MANY_AXES}[name]
    real = np.float64 if x64 else np.float32
    dtype = real if name in REAL_INPUT else (np.complex128 if x64 else np.complex64)
    model = assert_exports_match(
        fn,
        [(("B", 3, "N"), np.dtype(dtype).name)],
        sizes={"B": [0, 2], "N": [2, 5, 16, 33]},
        constraints=("N >= 2",),
        enable_double_precision=x64,
        opset=opset,
        rtol=1e-12 if x64 else 1e-5,
        atol=1e-10 if x64 else 1e-4,
    )
    ops = {n.op_type for n in model.graph.node}
    assert "DFT" not in ops and {"MatMul", "Cos", "Sin"} <= ops


def test_static_lengths_pick_matmul_or_dft():
    def ops(n):
        return {node.op_type for node in to_onnx(jnp.fft.fft, [((4, n), "complex64")]).graph.node}

    assert "MatMul" in ops(12) and "DFT" not in ops(12)  # not a power of two: exact matrix
    assert "DFT" in ops(256) and "MatMul" not in ops(256)  # power of two: onnxruntime's radix-2 FFT


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_signatures_of_both_opsets(opset):
    model = assert_exports_match(jnp.fft.rfft, [((2, 64), "float32")], opset=opset, atol=1e-4)
    (dft,) = [n for n in model.graph.node if n.op_type == "DFT"]
    assert ("axis" in {a.name for a in dft.attribute}) == (opset < 20)


@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_dft_matrix_is_numpy_fft(n):
    rng = np.random.default_rng(n)
    z = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    pairs = np.stack([z.real, z.imag], -1).reshape(3, -1)
    unpair = lambda p: p.reshape(3, -1, 2) @ np.array([1, 1j])  # noqa: E731
    np.testing.assert_allclose(
        unpair(pairs @ dft_matrix(n, FFT, np.float64)), np.fft.fft(z), atol=1e-12
    )
    np.testing.assert_allclose(
        unpair(pairs @ dft_matrix(n, IFFT, np.float64)), np.fft.ifft(z), atol=1e-12
    )
    np.testing.assert_allclose(
        unpair(z.real @ dft_matrix(n, RFFT, np.float64)), np.fft.rfft(z.real), atol=1e-12
    )
    half = np.fft.rfft(z.real)
    half_pairs = np.stack([half.real, half.imag], -1).reshape(3, -1)
    np.testing.assert_allclose(
        half_pairs @ dft_matrix(n, IRFFT, np.float64), np.fft.irfft(half, n), atol=1e-12
    )


def test_freq_and_shift():
    def fn(z):
        return (
            jnp.fft.fftshift(jnp.fft.fft(z), axes=-1) * jnp.fft.fftfreq(z.shape[-1], d=0.1),
            jnp.fft.ifftshift(z, axes=-1),
            jnp.fft.rfftfreq(2 * z.shape[-1]) * z.shape[0],
        )

    assert_exports_match(fn, [(("B", 9), "complex64")], sizes={"B": [1, 3]}, atol=1e-4)


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "fft2", "irfft2"])
@given(data=st.data(), length=st.sampled_from([1, 2, 7, 16, 33, 64, 100]), x64=st.booleans())
def test_tensorrt_has_no_dft_so_ffts_are_matmuls(name, data, length, x64):
    # TensorRT 10 has no DFT: a static axis is a MatMul against a stored matrix (up to MATMUL_MAX)
    fn = {**ONE_AXIS, **MANY_AXES}[name]
    shape = (2, 3, length) if name.endswith("2") else (2, length)
    if name.startswith("irfft") and length == 1:
        shape = (*shape[:-1], 2)
    x = _values(data, name, shape, x64)
    scale = float(np.max(np.abs(np.asarray(fn(jnp.asarray(x)))), initial=1.0))
    tol = 1e-12 if x64 else 1e-5
    model = assert_exports_match_on(fn, x, target="tensorrt", rtol=tol, atol=tol * scale)
    assert "DFT" not in {n.op_type for n in model.graph.node}


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("fft", {"N": [2, 9, 64]}),
        ("irfft", {"N": [2, 9, 64]}),
        pytest.param("rfft", {"N": [2048]}, marks=pytest.mark.slow),
    ],
)
def test_tensorrt_symbolic_and_long_axes_are_matrices_built_at_run_time(name, sizes):
    # a symbolic length (or a static one above MATMUL_MAX, up to NO_DFT_MAX): cos/sin matrices
    # computed from the length at run time; measured at most 5e-7 of the spectrum's max to 4096
    fn = ONE_AXIS[name]
    dtype = "float32" if name in REAL_INPUT else "complex64"
    model = assert_exports_match(
        fn,
        [((2, "N"), dtype)],
        sizes=sizes,
        constraints=("N >= 2",),
        target="tensorrt",
        rtol=1e-5,
        atol=2e-4 if max(sizes["N"]) > 64 else 1e-4,
    )
    ops = {n.op_type for n in model.graph.node}
    assert "DFT" not in ops and {"MatMul", "Cos", "Sin"} <= ops


def test_tensorrt_fft_above_the_limit_fails_before_writing():
    with pytest.raises(
        ConversionError,
        match=r"(?s)tensorrt cannot run .*DFT .*test_fft.py:\d+.*up to 4096 long is a MatMul",
    ):
        to_onnx(lambda x: jnp.fft.rfft(x), [((2, 8192), "float32")], target="tensorrt")
