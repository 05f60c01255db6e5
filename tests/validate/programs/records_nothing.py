"""Runs, but computes nothing that validate records."""

print("hello")
