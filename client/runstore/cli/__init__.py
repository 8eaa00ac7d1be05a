"""The ``runstore`` command (``runstore.cli.program``): the operator's commands,
which call a running server over gRPC, plus those installed distributions add
(``runstore.cli.plugins``); runstore-server adds ``serve``, ``migrate`` and
``backup``. See ``docs/cli.md``."""
