"""Request metadata keys that client and server read alike (docs/clients/index.md)."""

from __future__ import annotations

from typing import Final

READ_LAG_KEY: Final = "x-runstore-read-lag"
"""Set to ``READ_LAG_TOLERATED`` on a record listing that may be served by a
standby (``--read-database-url``): an export, say, that does not need the
commits of the last moments. Without it every worker-facing read is served by
the primary, which has every acknowledged write (docs/failover.md)."""

READ_LAG_TOLERATED: Final = "tolerated"

READ_LAG_METADATA: Final = ((READ_LAG_KEY, READ_LAG_TOLERATED),)
"""The metadata entry, as the Python client's ``metadata=`` takes it."""
