"""Posterior sampling in a Gamma-Poisson model with ``jax.random.gamma`` inside the export.

Each row of ``counts`` holds event counts observed in equal time windows; with a
Gamma(alpha, beta) prior on the event rate, the posterior is Gamma(alpha + sum(counts),
beta + n). The exported function draws posterior rate samples for every row from a PRNG key
given at run time (its uint32 key data), so the ONNX graph carries JAX's Marsaglia-Tsang
rejection sampler (a while loop per element) and reproduces JAX's samples for the same key.
The number of rows B is symbolic.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn import to_onnx, verify

NUM_SAMPLES = 64
PRIOR_ALPHA, PRIOR_BETA = 2.0, 1.0


def posterior_rates(key_data: jax.Array, counts: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Posterior samples of each row's rate, shape (B, NUM_SAMPLES), and their mean per row."""
    key = jax.random.wrap_key_data(key_data)
    alpha = PRIOR_ALPHA + counts.sum(axis=-1)
    beta = PRIOR_BETA + counts.shape[-1]
    shape = (NUM_SAMPLES, *alpha.shape)
    samples = (jax.random.gamma(key, alpha, shape=shape) / beta).T
    return samples, samples.mean(axis=-1)


KEY = ((2,), "uint32")
COUNTS = ("B", 12)


def main(path: str = "gamma_sampling.onnx") -> onnx.ModelProto:
    specs = [KEY, COUNTS]
    to_onnx(posterior_rates, specs, path=path)
    model = onnx.load(path)
    counts = np.random.default_rng(0).poisson(3.0, size=(4, 12)).astype(np.float32)
    key_data = np.asarray(jax.random.key_data(jax.random.key(0)))
    print(verify(posterior_rates, model, specs, input_values=[key_data, counts]))
    print("posterior mean rates:", np.asarray(posterior_rates(jnp.asarray(key_data), counts)[1]))
    return model


if __name__ == "__main__":
    main(*sys.argv[1:])
