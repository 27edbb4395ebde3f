"""Benchmarks: `python -m bench.<name>`; each prints a table and writes bench/results/<name>.json."""
