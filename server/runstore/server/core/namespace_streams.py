"""Ending the open streams of a deleted namespace (docs/namespaces.md).

A Watch stream admitted into a namespace outlives the check that admitted it.
When the namespace stops being active (deleted on this replica, or seen gone
by the directory's refresh), every stream open in it ends with
``NAMESPACE_NOT_FOUND``, as a new call into it would be refused. This is the
namespace code's own rule: it holds whether or not quotas are configured.
"""

from __future__ import annotations

from runstore.server.core.namespaces import NamespaceDirectory, namespace_deleted
from runstore.server.stream_ending import EndableStream


class NamespaceStreams:
    """The streams open per namespace; ``directory`` says when one is gone."""

    def __init__(self, directory: NamespaceDirectory) -> None:
        self._open: dict[str, set[EndableStream]] = {}
        directory.on_gone(self._gone)

    def open(self, namespace: str) -> EndableStream:
        """A new stream in ``namespace``, ended if the namespace goes; built
        in the stream's own task (the task ``end`` wakes)."""
        stream = EndableStream()
        self._open.setdefault(namespace, set()).add(stream)
        return stream

    def close(self, namespace: str, stream: EndableStream) -> None:
        """``stream`` ended (however): it is no longer counted."""
        streams = self._open.get(namespace)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._open[namespace]

    def _gone(self, namespace: str) -> None:
        refusal = namespace_deleted(namespace)
        for stream in list(self._open.pop(namespace, ())):
            stream.end(refusal)
