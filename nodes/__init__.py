"""Real node processes that run on emulated hosts, and their sans-I/O protocol cores."""
