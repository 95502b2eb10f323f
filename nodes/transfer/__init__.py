"""TCP file server and client for the transfer experiment (seed 002)."""
