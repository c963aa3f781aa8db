"""Test doubles and process helpers shipped with the code, for tests, benchmarks and fault drills."""
