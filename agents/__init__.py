"""Placement agents: grouper-placer, baselines (coming: see the issues)."""
