"""A ``VectorSignWarning`` names the user's line wherever an export's eigen-, singular or Schur
vectors come from a path that is not LAPACK's (so their signs need not be JAX's), and only
there: not where the lowering follows LAPACK, not where nothing reads the vectors."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.linalg import schur

from jax2onnx_nn import VectorSignWarning, to_onnx
from jax2onnx_nn.core.lowerings.lapack import gesdd, stedc
from jax2onnx_nn.testing import assert_exports_match


def _sign_warnings(fn, specs) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        to_onnx(fn, specs)
    return [w for w in caught if issubclass(w.category, VectorSignWarning)]


def _eigh(a):
    return jnp.linalg.eigh(a)  # the line the warning names


def _svd(a):
    return jnp.linalg.svd(a, full_matrices=False)


def test_eigh_of_a_symbolic_size_warns_at_the_users_line():
    (caught,) = _sign_warnings(_eigh, [("N", "N")])
    message = str(caught.message)
    assert "test_vector_sign_warning.py:" in message and "(_eigh)" in message
    assert "eigh of float32[N,N]: a symbolic size" in message
    assert f"syevd's path: a static size 2 to {stedc.STEDC_LIMIT}" in message
    assert "largest-magnitude entry real and positive" in message
    assert caught.filename == __file__  # the export call, the user's frame


def test_a_library_function_exported_itself_warns_without_a_line():
    """``to_onnx(jnp.linalg.eigh, ...)``: no line of the user's in the jaxpr; the warning's
    own location is the export call."""
    (caught,) = _sign_warnings(jnp.linalg.eigh, [("N", "N")])
    assert str(caught.message).startswith("eigh of float32[N,N]: a symbolic size")
    assert caught.filename == __file__


def test_eigh_above_the_limit_warns():
    n = stedc.STEDC_LIMIT + 1
    (caught,) = _sign_warnings(_eigh, [(n, n)])
    assert f"a size above {stedc.STEDC_LIMIT} is" in str(caught.message)


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (_eigh, (2, 8, 8)),  # syevd's path
        (_eigh, (1, 1)),  # one vector, [1]
        (jnp.linalg.eigvalsh, ("N", "N")),  # no vectors
        (lambda a: jnp.linalg.eigh(a)[0], (300, 300)),  # no vectors read
        (_svd, (30, 20)),  # gesdd's path
        (_svd, ("N", 1)),  # a column: gesdd's sign
        (jnp.linalg.svd, (1, 7)),  # a row
        (lambda a: jnp.linalg.svd(a)[1], ("N", "N")),  # the values alone
        (lambda a: jnp.linalg.svd(a, compute_uv=False), (200, 150)),
    ],
)
def test_no_warning_where_the_signs_are_jaxs_or_unread(fn, shape):
    assert _sign_warnings(fn, [shape]) == []


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        (("B", "N", "N"), "a symbolic size"),
        (
            (3, gesdd.GESDD_LIMIT + 10, gesdd.GESDD_LIMIT + 1),
            f"a shorter side above {gesdd.GESDD_LIMIT}",
        ),
    ],
)
def test_svd_with_vectors_jacobi_warns(shape, why):
    (caught,) = _sign_warnings(_svd, [shape])
    assert why in str(caught.message) and "svd of float32[" in str(caught.message)


def test_complex_eig_and_schur_above_the_zgees_limit_warn():
    (eig,) = _sign_warnings(lambda a: jnp.linalg.eig(a)[1], [((17, 17), np.complex64)])
    assert "another phase than JAX's" in str(eig.message)
    assert "in the order they converge in" in str(eig.message)
    (vectors,) = _sign_warnings(lambda a: schur(a)[1], [((17, 17), np.complex64)])
    assert "schur of complex64[17,17]" in str(vectors.message)
    assert _sign_warnings(lambda a: jnp.linalg.eig(a)[0], [((17, 17), np.complex64)]) == []
    assert _sign_warnings(lambda a: jnp.linalg.eig(a), [((16, 16), np.complex64)]) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_svd_values_alone_when_nothing_reads_the_vectors(dtype):
    """``jnp.linalg.svd(a)[1]`` computes no U or V^T: JAX's values, the graph of ``svdvals``."""
    values = lambda a: jnp.linalg.svd(a)[1]  # noqa: E731
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    a = np.random.default_rng(0).normal(size=(2, 40, 30)).astype(dtype)
    assert_exports_match(
        values,
        [(a.shape, dtype)],
        input_values=[a],
        enable_double_precision=dtype == np.float64,
        **tol,
    )
    ops = sorted(n.op_type for n in to_onnx(values, [(2, 40, 30)]).graph.node)
    assert ops == sorted(n.op_type for n in to_onnx(jnp.linalg.svdvals, [(2, 40, 30)]).graph.node)
