"""verify's comparison: the real errors, exact special values, no numpy warnings."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn.core.verify import compare


def test_relative_error_is_reported_within_atol_too():
    expected = np.array([1e-3, 2.0, 0.0], np.float32)
    actual = np.array([1e-3 + 2e-6, 2.0, 1e-6], np.float32)
    result = compare("out_0", actual, expected)
    assert result.ok  # every difference is within atol = 1e-5
    assert result.max_rel == pytest.approx(2e-3, rel=1e-3)  # not "max rel 0"
    assert result.max_abs == pytest.approx(2e-6, rel=1e-3)


@given(
    values=hnp.arrays(np.float32, st.integers(1, 8), elements=st.sampled_from([np.inf, -np.inf, np.nan, 0.0, 1.5, -2.0])),
    flip=st.integers(0, 7),
    exact=st.booleans(),
)
def test_inf_and_nan_compare_without_warnings(values, flip, exact):
    """Also with rtol=0 (an exact comparison), where rtol times an inf once warned."""
    actual = values.copy()
    i = flip % len(actual)
    actual[i] = 7.0 if not np.isfinite(values[i]) else np.inf
    tolerances = {"rtol": 0.0, "atol": 0.0} if exact else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # RuntimeWarning: invalid value encountered in subtract
        assert compare("out_0", values.copy(), values, **tolerances).ok
        result = compare("out_0", actual, values, **tolerances)
    assert not result.ok
    assert np.isfinite(result.max_abs) and np.isfinite(result.max_rel)
