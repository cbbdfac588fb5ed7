"""Expands sweeps into jobs, submits them, follows progress and aggregates rows."""
