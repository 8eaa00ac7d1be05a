"""What each method counts against among its namespace's quotas
(docs/namespaces.md#quotas): the kinds, the quotas' names, and ``METHODS``,
derived from each method's declaration (``method_rules``: quota class and
adds data), so this table has no entries of its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from runstore.server import method_rules

WRITE: Final = "write"
READ: Final = "read"
WATCH: Final = "watch"

WRITES_PER_SECOND: Final = "writes_per_second"
READS_PER_SECOND: Final = "reads_per_second"
WATCH_STREAMS: Final = "watch_streams"
STORED_BYTES: Final = "stored_bytes"


@dataclass(frozen=True, slots=True)
class Rule:
    """What a method counts against: ``kind`` (write, read or watch), and
    whether it adds stored data (refused at the stored_bytes quota)."""

    kind: str
    adds_data: bool = False


_KINDS: Final = {
    method_rules.WRITES: WRITE,
    method_rules.READS: READ,
    method_rules.WATCH_STREAMS: WATCH,
}

METHODS: Final[Mapping[str, Rule]] = {
    method: Rule(_KINDS[declared.quota], adds_data=declared.adds_data)
    for method, declared in method_rules.DECLARED.items()
    if declared.quota is not None
}
"""Every method with a quota class and what it counts against. Lifecycle
changes that stop or end a run do not add data, so work in flight can finish
at the stored_bytes quota; seed uploads do, publishing and settling do not."""


def rule(method: str) -> Rule | None:
    """What ``method`` counts against; None for a method with no quota."""
    return METHODS.get(method)
