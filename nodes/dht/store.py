"""The index server's in-memory store: file name -> the addresses that hold it.

The storage interface `server_core.ServerCore` uses (documented there); kept apart from
the core so each stays a small module.
"""


class MemoryStore:
    """In-memory index: file name -> insertion-ordered set of holder addresses."""

    def __init__(self):
        self._index = {}
        self._answers = {}      # name -> holders(name) as last returned, until name changes
        self.entries = 0

    def add(self, name, addr):
        """Record that addr holds name; return True if it was new."""
        holders = self._index.setdefault(name, {})
        if addr in holders:
            return False
        holders[addr] = None
        self.entries += 1
        self._answers.pop(name, None)
        return True

    def remove(self, name, addr):
        """Forget that addr holds name; return True if it was there."""
        holders = self._index.get(name)
        if not holders or addr not in holders:
            return False
        del holders[addr]
        self.entries -= 1
        self._answers.pop(name, None)
        if not holders:
            del self._index[name]
        return True

    def holders(self, name):
        """Return the holders of name, oldest first (empty tuple if none).

        The tuple is remembered until name's holders change: a name is searched far more
        often than registered, and building it from the dict was a fifth of a server's
        answer to a search under PyPy. At most one per name, so it is bounded as the
        index is."""
        found = self._answers.get(name)
        if found is None:
            holders = self._index.get(name)
            if not holders:
                return ()
            found = self._answers[name] = tuple(holders)
        return found

    def count(self, name):
        """Return how many holders name has."""
        return len(self._index.get(name, ()))

    def has(self, name, addr):
        """Return True if addr holds name."""
        return addr in self._index.get(name, ())

    def __len__(self):
        return len(self._index)
