"""Packaging shim: the layout of the packages, which pyproject.toml's table cannot express.

The catalogs (data/) and the named queries (queries/) stay at the top of the repository, and install as the
sub-packages engine._data and engine._queries (package data), so a wheel carries them next to the code and
engine/__init__.py finds them through importlib.resources in a regular install and an editable one alike.
The other packages are found as pyproject.toml's `packages.find` found them (namespace packages included), so a
new one needs no edit here; everything else is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

PACKAGE_DATA_DIRS = {"engine._data": "data", "engine._queries": "queries"}

setup(
    packages=find_namespace_packages(include=["engine*", "reports*"]) + list(PACKAGE_DATA_DIRS),
    package_dir=PACKAGE_DATA_DIRS,
    package_data={name: ["**/*"] for name in PACKAGE_DATA_DIRS},
    exclude_package_data={name: ["**/__pycache__/*", "__pycache__/*", "*.pyc"] for name in PACKAGE_DATA_DIRS},
)
