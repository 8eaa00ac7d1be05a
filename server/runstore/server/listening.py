"""Whether the addresses a server listens on can be bound, said before the
database is touched, in one line naming the flag
(docs/errors.md#start-up-failures)."""

from __future__ import annotations

import socket

from runstore.server.config import ServerConfig


class ListenError(OSError):
    """The listen address cannot be bound (for example: already in use)."""


def bind_problem(listen: str) -> str | None:
    """Why ``listen`` (``host:port``) cannot be bound now, as the operating
    system says it ("address already in use"), or None (gRPC reports only that
    binding failed, after logging a C-core line of its own)."""
    if listen.startswith("unix"):
        return None
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    except ValueError:
        pass
    return None


def check_listen_addresses(config: ServerConfig, *, reuse_port: bool = False) -> None:
    """Refuses an address already taken before the database is touched, in
    one line naming the flag. A worker of ``--workers`` shares the gRPC port
    on purpose, so only its console is checked."""
    checked = [("--console-listen", config.console_listen)]
    if not reuse_port:
        checked.insert(0, ("--listen", config.listen))
    for flag, listen in checked:
        problem = bind_problem(listen) if listen else None
        if problem is not None:
            raise ListenError(f"cannot listen on {listen} ({flag}): {problem}")
