"""The one registry of what is open per key (``runstore.server.open_per_key``)."""

from __future__ import annotations

from runstore.server.open_per_key import OpenPerKey


def test_items_are_counted_per_key_and_an_emptied_key_is_forgotten() -> None:
    registry: OpenPerKey[object] = OpenPerKey()
    first, second, elsewhere = object(), object(), object()
    registry.add("team-a", first)
    registry.add("team-a", second)
    registry.add("team-b", elsewhere)
    assert registry.count("team-a") == 2 and registry.counts() == {"team-a": 2, "team-b": 1}
    registry.discard("team-a", first)
    registry.discard("team-a", first)  # ending twice is harmless
    assert registry.live("team-a") == {second}
    registry.discard("team-a", second)
    # Memory stays bounded by what is open: no empty key is kept.
    assert "team-a" not in registry and registry.counts() == {"team-b": 1}
    assert registry.count("team-a") == 0 and set(registry.live("team-a")) == set()


def test_pop_hands_over_a_keys_items_and_forgets_the_key() -> None:
    registry: OpenPerKey[int] = OpenPerKey()
    for item in (1, 2, 3):
        registry.add("gone", item)
    registry.add("kept", 4)
    assert sorted(registry.pop("gone")) == [1, 2, 3]
    assert registry.pop("gone") == []
    assert list(registry) == ["kept"] and sorted(registry.every()) == [4]
