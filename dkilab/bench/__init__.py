"""Benchmarks that print figures (`dkilab bench ...`); targets live here, not in timed tests."""
