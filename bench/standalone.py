"""What a workload module run on its own (``python -m bench.<module>``) shares
with the harness: the backend flags, a throwaway migrated database per
backend, and the printed report. The PostgreSQL server itself, given or
private, is ``bench/postgres.py``'s."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

DEFAULT_POSTGRES_URL = os.environ.get(
    "RUNSTORE_BENCH_POSTGRES_URL", os.environ.get("RUNSTORE_TEST_POSTGRES_URL", "")
)
"""Empty: the run starts a private server (``bench.postgres.provide``)."""


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend", default="sqlite,postgres", help="comma-separated backends (sqlite, postgres)"
    )
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES_URL,
        help="a PostgreSQL server where throwaway databases may be created (default "
        "RUNSTORE_BENCH_POSTGRES_URL, then RUNSTORE_TEST_POSTGRES_URL; without either, a "
        "private durable server started for the run and deleted at its end)",
    )


def backends(value: str | list[str]) -> list[str]:
    """``--backend``'s list (already a list once the harness has parsed it)."""
    if isinstance(value, list):
        return value
    return [name.strip() for name in value.split(",") if name.strip()]


async def each_backend(
    names: list[str],
    postgres_url: str,
    measure: Callable[[str, str], Awaitable[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """``measure(backend, url)`` on a fresh migrated database of each backend, in turn."""
    from bench.harness import database
    from runstore.server.db import migrate

    results = []
    for backend in names:
        async with database(backend, postgres_url) as url:
            await migrate.upgrade(url)
            results.append(await measure(backend, url))
    return results


def print_report(table: str | None, results: list[dict[str, Any]]) -> None:
    """The table for people, then one JSON line per backend for scripts."""
    if table:
        print(table)
    for result in results:
        print(json.dumps(result))
