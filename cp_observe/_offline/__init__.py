"""Offline scoring: the reference-shaped scorer API and ``run_evals`` over a data set."""
