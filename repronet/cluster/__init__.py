"""The multi-machine backend: one Mininet over several servers, driven over ssh (issue 16)."""
