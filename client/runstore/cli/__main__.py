"""``python -m runstore.cli``: the ``runstore`` command without the script on the PATH."""

import sys

from runstore.cli.program import main

if __name__ == "__main__":
    sys.exit(main())
