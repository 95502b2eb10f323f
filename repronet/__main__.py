"""``python -m repronet``: the ``repronet`` command line (see repronet/cli.py)."""

import sys

from repronet.cli import main

sys.exit(main())
