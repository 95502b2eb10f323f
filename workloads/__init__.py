"""Parameter sweeps and load generators."""
