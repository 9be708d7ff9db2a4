"""Benchmarks: ``python -m eval.bench NAME``. Each compares against a reference in the same run."""
