"""The one duration syntax of every time flag (docs/configuration.md#durations)."""

from __future__ import annotations

import pytest

from runstore.contract.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("4s", 4.0),
        ("250ms", 0.25),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("30d", 30 * 86400.0),
        ("600", 600.0),
        ("0.5", 0.5),
        ("1.5s", 1.5),
        ("0", 0.0),
        (" 4s ", 4.0),
    ],
)
def test_every_unit_and_a_bare_number_of_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-5m", "-1", " -0.5s"])
def test_negative_durations_are_refused_as_negative(text: str) -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["", "s", "4 s", "4sec", "1h30m", "4S", "1e3", "nan", "inf", "x"])
def test_malformed_durations_say_the_syntax(text: str) -> None:
    with pytest.raises(ValueError, match=r"250ms, 4s, 10m, 2h, 30d"):
        parse_duration(text)


def test_an_overflowing_number_is_not_a_duration() -> None:
    with pytest.raises(ValueError, match="finite"):
        parse_duration("9" * 400 + "d")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (4, "4s"), (600, "10m"), (7200, "2h"), (86400 * 30, "30d"), (0.25, "250ms")],
)
def test_format_prints_what_parse_reads(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
