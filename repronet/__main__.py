"""``python -m repronet``: the ``repronet`` command line (see repronet/cli.py)."""

import os
import sys

from repronet.cli import main

try:
    status = main()
    sys.stdout.flush()
except BrokenPipeError:     # `repronet list | head`: the reader left, not an error
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    status = 0
sys.exit(status)
