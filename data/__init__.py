"""Packaging shim: data/ installs as the package engine._data (setup.py), so that a wheel carries the catalogs
and engine.DATA_DIR finds them through importlib.resources. Nothing imports this module by this name."""
