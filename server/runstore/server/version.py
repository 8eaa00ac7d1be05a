"""runstore-server's version, written here and nowhere else: hatchling reads it
into the distribution's metadata, and the server announces it in every
response's initial metadata (``x-runstore-version``) and in
``runstore_build_info`` (docs/development.md#releases)."""

__version__ = "0.3.0.dev0"
