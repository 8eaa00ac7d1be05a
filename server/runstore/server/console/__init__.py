"""The read-only web console (``runstore serve --console-listen``): sessions, runs
and records in a browser, live, over the store core and the gRPC API's roles.
See docs/console.md."""
