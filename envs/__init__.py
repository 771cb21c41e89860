"""Gymnasium environments over placer's measured and simulated step time (coming: see the issues)."""
