"""A ``RemoteStore`` that makes a call, stays idle, and calls again, in a process
of its own so a test sees everything the client logs (gRPC core writes to the
process's stderr).

Usage: python -m tests.idle_client TARGET RUN_ID IDLE PING_INTERVAL [IDLE_TIMEOUT]
(seconds; without IDLE_TIMEOUT the client never closes an idle connection
itself). Prints the channel's state after the idle time as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from runstore.client import Keepalive, RemoteStore


async def main(target: str, run_id: str, idle: float, keepalive: Keepalive) -> None:
    async with RemoteStore(target, keepalive=keepalive) as store:
        await store.load_run(run_id)
        await asyncio.sleep(idle)
        state = store.channel.get_state().name
        await store.load_run(run_id)
    print(json.dumps({"state_after_idle": state}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    target, run_id, idle, interval, *idle_timeout = sys.argv[1:]
    keepalive = Keepalive(
        interval=float(interval),
        timeout=float(interval) * 2,
        idle_timeout=float(idle_timeout[0]) if idle_timeout else 3600.0,
    )
    asyncio.run(main(target, run_id, float(idle), keepalive))
