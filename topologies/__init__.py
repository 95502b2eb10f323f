"""Topology scripts, the network builder and the experiment runner."""
