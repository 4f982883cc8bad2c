"""Packaging shim: queries/ installs as the package engine._queries (setup.py), so that a wheel carries the
named queries and engine.QUERIES_DIR finds them through importlib.resources. Nothing imports this module by
this name."""
