"""What the installed JAX computes wrong, found by running it: tests that compare with JAX
leave those cases out (the export computes the right numbers there; docs/limitations.md says so)."""

from __future__ import annotations

import functools

import jax
import numpy as np


@functools.cache
def cpu_conv_crop_wrong_for_batches() -> bool:
    """jaxlib 0.10's CPU convolution with a negative low padding (a crop) reads out of bounds:
    a batch of 2 gives other numbers than each of its rows alone, a single row can hold values
    of 1e30; jaxlib 0.12 is right. Detected on a batch of 2, where it always shows."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    w = rng.normal(size=(3, 3, 4)).astype(np.float32)

    def conv(v: np.ndarray) -> np.ndarray:
        return np.asarray(
            jax.lax.conv_general_dilated(
                v, w, (1,), [(-1, 1)], dimension_numbers=("NWC", "WIO", "NWC")
            )
        )

    rows = np.concatenate([conv(x[i : i + 1]) for i in range(2)])
    return not np.allclose(conv(x), rows, rtol=1e-5, atol=1e-5)


def conv_crop_wrong(padding: object) -> bool:
    """Whether JAX's own convolution is wrong for this padding (pairs per axis, or a string)."""
    lows = [lo for lo, _ in padding] if not isinstance(padding, str) else []
    return any(lo < 0 for lo in lows) and cpu_conv_crop_wrong_for_batches()
