"""``python -m runstore.server``: the ``runstore`` command (runstore-client's, with
this distribution's commands) without the script on the PATH."""

import sys

from runstore.cli.program import main

if __name__ == "__main__":
    sys.exit(main())
