"""Benchmarks of the Reflexa server, run as modules (`python -m bench.ingest`).

They start real server processes against throwaway databases and write their
results into their own marked section of docs/benchmarks.md. They measure; they
never assert on timings (that is what a benchmark is for, not a test).
"""
