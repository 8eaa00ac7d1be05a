"""runstore-client's version, written here and nowhere else: hatchling reads it
into the distribution's metadata, ``runstore --version`` prints it, and
runstore-server pins this exact version (docs/development.md#releases)."""

__version__ = "0.3.0.dev0"
"""This runstore-client's version (PEP 440)."""
