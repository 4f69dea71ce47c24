"""``python -m bench.cli``: the ``ingestwm`` command."""

import sys

from .app import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
