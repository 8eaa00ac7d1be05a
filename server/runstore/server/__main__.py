"""``python -m runstore.server``: the ``runstore`` command without the script on the PATH."""

import sys

from runstore.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
