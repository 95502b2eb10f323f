"""Running a command as an unprivileged user ('nobody') from a checkout it can read.

Several tests check what works without root (analysis, --help, refusals before the root
check) by dropping to uid 65534. That user must be able to read the checkout, and a clone
in a private folder (``mktemp -d`` makes it 0700) is not readable by anyone but root. Then
``checkout()`` returns a world-readable copy of the tracked files instead, made once per
test session, so the same checks run wherever the suite is cloned.
"""

import atexit
import functools
import os
import pathlib
import shutil
import subprocess
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
AS_NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups']


def can_read(path):
    """True if 'nobody' can read path (only root can ask)."""
    return subprocess.run(AS_NOBODY + ['test', '-r', str(path)],
                          capture_output=True).returncode == 0


@functools.lru_cache(maxsize=None)
def checkout():
    """This checkout if 'nobody' can read it, else a readable copy of its tracked files."""
    if os.geteuid() != 0 or can_read(REPO / 'repronet' / '__init__.py'):
        return REPO
    copy = pathlib.Path(tempfile.mkdtemp(prefix='repronet-nobody-'))
    atexit.register(shutil.rmtree, copy, True)
    files = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split('\0')
    for name in filter(None, files):
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    for root, dirs, names in os.walk(copy):
        os.chmod(root, 0o755)
        for name in names:
            os.chmod(os.path.join(root, name), 0o644)
    return copy
