"""``python -m rlreplay``: the same as the ``rlreplay`` command."""

import sys

from rlreplay.cli import main

if __name__ == "__main__":
    sys.exit(main())
