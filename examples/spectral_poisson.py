"""Periodic 2-D Poisson equation solved by FFT in float64, symbolic grid size.

Solves laplace(u) = f on the periodic square [0, L)^2 sampled on an N x N grid: in Fourier
space u_hat = -f_hat / |k|^2, with the mean (k = 0) of u set to zero. N is symbolic in the
exported graph, so the FFTs are ONNX ``DFT`` nodes on (real, imag) pairs and one file serves
every grid size. Run ``python -m examples.spectral_poisson [out.onnx]``.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.jax_internals import x64


def poisson_solve(f: jax.Array, length: jax.Array) -> jax.Array:
    """The zero-mean periodic solution u of laplace(u) = f on a square of side ``length``."""
    n = f.shape[0]
    k = 2 * jnp.pi * jnp.fft.fftfreq(n, d=1.0 / n) / length  # angular wavenumbers
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    inverse_laplacian = jnp.where(k2 == 0, 0.0, -1.0 / jnp.where(k2 == 0, 1.0, k2))
    return jnp.fft.ifft2(jnp.fft.fft2(f) * inverse_laplacian).real


def manufactured(n: int, length: float = 2 * np.pi) -> tuple[np.ndarray, np.ndarray]:
    """A right-hand side with a known solution: f = laplace(u) for u = sin(x) cos(2y) + cos(3x)."""
    x = np.arange(n) * length / n
    xx, yy = np.meshgrid(x, x, indexing="ij")
    w = 2 * np.pi / length
    u = np.sin(w * xx) * np.cos(2 * w * yy) + np.cos(3 * w * xx)
    f = -5 * w**2 * np.sin(w * xx) * np.cos(2 * w * yy) - 9 * w**2 * np.cos(3 * w * xx)
    return f, u


SPECS = [(("N", "N"), "float64"), ((), "float64")]


def main(path: str = "spectral_poisson.onnx") -> onnx.ModelProto:
    """Export with a symbolic grid; check against JAX on grids of 8, 15 and 32 points per side."""
    to_onnx(poisson_solve, SPECS, enable_double_precision=True, path=path)
    model = onnx.load(path)
    with x64(True):
        for n in (8, 15, 32):
            f, _ = manufactured(n)
            print(
                verify(
                    poisson_solve,
                    model,
                    SPECS,
                    input_values=[f, np.float64(2 * np.pi)],
                    enable_double_precision=True,
                )
            )
    return model


if __name__ == "__main__":
    main(*sys.argv[1:])
