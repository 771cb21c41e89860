"""Reports over finished runs and the benchmark models: tables and pictures, no new measurements.
Run from the repository root."""
