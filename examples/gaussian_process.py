"""Gaussian-process regression posterior (RBF kernel) in float64, symbolic number of test points.

The training set (``x_train``, ``y_train``, 32 points) is part of the graph's inputs; the number
of test points ``M`` is symbolic. The exported graph factors the kernel matrix once
(``cholesky``, unrolled up to 16 points and an ONNX ``Scan`` over blocks above), solves with it
(``cho_solve``: two triangular solves) and returns the posterior mean and variance at the test
points and the log marginal likelihood of the training data (``slogdet`` of the kernel matrix).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnx

from jax2onnx_nn import to_onnx, verify


def rbf(x1: jax.Array, x2: jax.Array, length_scale: jax.Array, variance: jax.Array) -> jax.Array:
    """k(x, x') = variance * exp(-|x - x'|^2 / (2 length_scale^2)) for rows of (n, d) and (m, d)."""
    sq = jnp.sum((x1[:, None, :] - x2[None, :, :]) ** 2, axis=-1)
    return variance * jnp.exp(-0.5 * sq / length_scale**2)


def gp_posterior(
    x_train: jax.Array,
    y_train: jax.Array,
    x_test: jax.Array,
    length_scale: jax.Array,
    variance: jax.Array,
    noise: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Posterior mean (M,), variance (M,) at ``x_test`` and the log marginal likelihood ()."""
    n = x_train.shape[0]
    k = rbf(x_train, x_train, length_scale, variance) + noise * jnp.eye(n, dtype=x_train.dtype)
    factor = jsl.cho_factor(k, lower=True)
    alpha = jsl.cho_solve(factor, y_train)
    k_star = rbf(x_train, x_test, length_scale, variance)  # (n, M)
    mean = (
        alpha @ k_star
    )  # not k_star.T @ alpha: onnxruntime 1.32 fuses Transpose+MatMul(1-D) wrongly
    v = jsl.solve_triangular(factor[0], k_star, lower=True)
    var = variance - jnp.sum(v * v, axis=0)
    _, logdet = jnp.linalg.slogdet(k)
    log_likelihood = -0.5 * (y_train @ alpha) - 0.5 * logdet - 0.5 * n * jnp.log(2 * jnp.pi)
    return mean, var, log_likelihood


def training_data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Noisy samples of sin(3x) on [-2, 2], as (n, 1) inputs and (n,) targets."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, size=(n, 1))
    return x, np.sin(3.0 * x[:, 0]) + 0.1 * rng.normal(size=n)


SPECS = [
    ((32, 1), "float64"),
    ((32,), "float64"),
    (("M", 1), "float64"),
    ((), "float64"),
    ((), "float64"),
    ((), "float64"),
]


def main(path: str = "gaussian_process.onnx") -> onnx.ModelProto:
    to_onnx(gp_posterior, SPECS, enable_double_precision=True, path=path)
    model = onnx.load(path)
    x, y = training_data()
    for m in (1, 50):
        values = [
            x,
            y,
            np.linspace(-2.5, 2.5, m)[:, None],
            np.float64(0.7),
            np.float64(1.0),
            np.float64(0.01),
        ]
        print(verify(gp_posterior, model, SPECS, input_values=values, enable_double_precision=True))
    return model


if __name__ == "__main__":
    main(*sys.argv[1:])
