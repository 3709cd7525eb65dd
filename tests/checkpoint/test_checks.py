"""``checkpoint.checks``: whole numbers and numbers, each refused with one line that
names the value, the range and what was given, in the caller's own error."""

from __future__ import annotations

import pytest

from checkpoint import checks
from checkpoint.errors import ConfigurationError


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"lowest": 1, "highest": 5}, 0, "n must be a whole number from 1 to 5, not 0"),
        ({"lowest": 1}, True, "n must be a whole number >= 1, not True"),
        ({"highest": 5}, 6, "n must be a whole number <= 5, not 6"),
        ({"unit": "seconds"}, 1.5, "n must be a whole number of seconds, not 1.5"),
    ],
)
def test_whole_refuses_what_is_not_a_whole_number_in_range(kwargs, value, message):
    with pytest.raises(ValueError) as caught:
        checks.whole(value, "n", **kwargs)
    assert str(caught.value) == message


def test_whole_returns_a_whole_number_in_range():
    assert checks.whole(5, "n", lowest=1, highest=5) == 5
    assert checks.whole(-3, "n") == -3


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({"lowest": 0}, -1, "x must be a number >= 0, not -1"),
        ({"above": 0}, 0, "x must be a number > 0, not 0"),
        ({}, "1", "x must be a number, not '1'"),
        ({}, False, "x must be a number, not False"),
    ],
)
def test_number_refuses_what_is_not_a_number_in_range(kwargs, value, message):
    with pytest.raises(ConfigurationError) as caught:
        checks.number(value, "x", error=ConfigurationError, **kwargs)
    assert str(caught.value) == message


def test_number_returns_an_int_or_a_float_in_range():
    assert checks.number(0.5, "x", above=0) == 0.5
    assert checks.number(3, "x", lowest=3) == 3
