"""The network builder has no silent fallback: link emulation that cannot load is an error."""

import subprocess
import sys

BREAK_LINKEMU = r'''
import importlib.abc, sys
class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == 'repronet.emu.linkemu':
            raise ImportError('linkemu is broken on purpose')
        return None
sys.meta_path.insert(0, Broken())
try:
    import repronet.emu.network
except ImportError as e:
    print('refused:', e)
else:
    print('imported without link emulation')
'''


def test_a_broken_link_emulation_module_stops_the_builder_from_loading():
    # Before: 'except ImportError' switched every run to bandwidth-only links, silently.
    out = subprocess.run([sys.executable, '-c', BREAK_LINKEMU], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == 'refused: linkemu is broken on purpose', out.stderr
