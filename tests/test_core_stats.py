import math

from toolgym.stats import estimate


def test_binary_standard_error_is_binomial():
    e = estimate([1, 1, 1, 0])
    assert e.mean == 0.75 and e.n == 4
    assert math.isclose(e.stderr, math.sqrt(0.75 * 0.25 / 4))


def test_continuous_standard_error_uses_sample_sd():
    e = estimate([1.0, 2.0, 3.0])
    assert math.isclose(e.stderr, 1.0 / math.sqrt(3))


def test_unscored_and_errors_stay_out_of_the_denominator():
    e = estimate([1.0, None, float("nan"), 0.0], n_errors=2)
    assert (e.n, e.n_unscored, e.n_errors, e.mean) == (2, 2, 2, 0.5)
    assert estimate([]).format() == "n/a"
