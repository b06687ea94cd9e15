"""Test machinery shipped with odradek: the deterministic cluster simulator (`odradek.testing.sim`).

Nothing in `odradek` outside this package imports it (an import-linter contract says so).
"""
