"""Backend-independent run machinery: runner, options, sweep, results, provenance, CPU, lock."""
