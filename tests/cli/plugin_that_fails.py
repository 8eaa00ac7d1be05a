"""A plugin module whose import fails, as one built for another runstore-client would."""

raise ImportError("cannot import name 'Command' from 'runstore.cli.plugins' (stale build)")
