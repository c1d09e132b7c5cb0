"""Helpers shared by the tests: fixtures, the stand-in model, worker-process tools."""
