"""Benchmarks: each one plans a workload; lifecycle.run() takes every one through the same steps."""
