"""memsim works installed, not only from its checkout: the catalogs (data/) and the queries (queries/) ship in the
wheel as engine._data and engine._queries, and engine.DATA_DIR / QUERIES_DIR find them through importlib.resources.

The slow tests build the wheel from a copy of the repository's build inputs, install it in a fresh venv (that sees
the test interpreter's packages for the heavy dependencies), and run memsim from a directory outside the repository;
an editable install in another fresh venv must find the same files through importlib.resources too.
"""

import csv
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

import engine
from engine.dataset.sweep import run_sweep

REPO = Path(__file__).resolve().parent.parent
BUILD_INPUTS = ["pyproject.toml", "setup.py", "README.md", "engine", "reports", "data", "queries"]
PACKAGE_DATA = {"data": "engine/_data", "queries": "engine/_queries"}  # repository folder -> where the wheel has it
TINY_SPEC = """\
title = "install check"
[axes]
model = ["llama-3.1-8b", "gpt2-xl"]
gpu = ["h100-sxm-80gb", "rtx-4090"]
n_gpus = [1, 8]
zero_stage = [0, 3]
"""


def test_data_and_queries_are_found():
    assert (engine.DATA_DIR / "models.toml").is_file() and (engine.DATA_DIR / "gpus.toml").is_file()
    assert (engine.QUERIES_DIR / "summary.sql").is_file() and (engine.QUERIES_DIR / "_macros.sql").is_file()


def test_a_checkout_without_the_package_reads_its_own_folder():
    # a checkout imported from PYTHONPATH (a Ray working_dir) has no engine._data package
    assert engine._package_files("engine._no_such_package", "data") == engine.REPO_ROOT / "data"


def test_a_folder_another_checkout_maps_the_name_to_is_not_used(monkeypatch, tmp_path):
    # an editable install of another checkout maps engine._data to its data/: this checkout keeps reading its own
    monkeypatch.setattr(engine.importlib.resources, "files", lambda package: tmp_path)
    assert engine._package_files("engine._data", "data") == engine.REPO_ROOT / "data"


def test_the_package_is_used_where_this_installation_has_it(monkeypatch):
    inside = engine.REPO_ROOT / "engine" / "_data"  # where a wheel puts it (REPO_ROOT is then site-packages)
    monkeypatch.setattr(engine.importlib.resources, "files", lambda package: inside)
    assert engine._package_files("engine._data", "data") == inside


def data_files(folder: Path) -> set[str]:
    """Files under a folder, relative, as a wheel lists them (no bytecode)."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def copy_build_inputs(dest: Path) -> Path:
    """What the build reads, copied (a build in the checkout would leave build/ behind and race other builds)."""
    dest.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in BUILD_INPUTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=junk)
        else:
            shutil.copy2(src, dest / name)
    return dest


def run(argv: list, cwd: Path, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    shown = f"{' '.join(map(str, argv))} -> {done.returncode}"
    assert done.returncode == 0, f"{shown}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def pip_install(python: Path, *args) -> None:
    """pip of this interpreter, installing into `python`'s environment (the venv has no pip of its own, so the
    setuptools that builds is the system's, not an older one bundled with the venv)."""
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *build_isolation(), *args],
        cwd=REPO)


def build_isolation() -> list[str]:
    """pip's flag to build with the installed setuptools when it meets pyproject's build requirement and builds
    wheels itself (>= 70.1), so that the test needs no package index; else pip fetches one to build with."""
    try:
        version = tuple(int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if version >= (70, 1) else []


def our_site_folders() -> list[str]:
    """Where this interpreter finds its packages: its venv's site-packages, or the system's (and the user's)."""
    folders = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return [f for f in dict.fromkeys(folders) if Path(f).is_dir()]


def fresh_venv(path: Path) -> Path:
    """A new venv that sees this interpreter's packages (numba, polars, ..., the setuptools that builds) after its
    own, whether the tests run in a venv or in the system's Python. (`-m venv --system-site-packages` run from a
    venv gives the base interpreter's site-packages instead: no numba, an old setuptools.) The folders go in as
    plain paths of a .pth file, so their own .pth files stay unread: an editable memsim installed there (this
    checkout's) never shadows the one under test."""
    run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], path.parent).stdout
    Path(purelib.strip(), "_test_interpreter_site.pth").write_text("\n".join(our_site_folders()) + "\n")
    return python


def clean_env(cache: Path) -> dict:
    """The environment of the installed commands: no PYTHONPATH back into a checkout, numba's cache left for
    engine._configure_numba to place (under XDG_CACHE_HOME, keyed by the digest of the files it finds)."""
    env = {k: val for k, val in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    return env | {"XDG_CACHE_HOME": str(cache)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(source copy, wheel, the source digest of the kernels when it was copied)."""
    tmp = tmp_path_factory.mktemp("install")
    src = copy_build_inputs(tmp / "src")
    digest = engine._compiled_sources_digest()  # of the checkout just copied
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *build_isolation(), "-w", tmp / "dist", src], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("memsim-*.whl")
    return src, wheel, digest


@pytest.mark.slow
def test_wheel_carries_every_data_and_query_file(built):
    src, wheel, _ = built
    listed = zipfile.ZipFile(wheel).namelist()
    for folder, inside in PACKAGE_DATA.items():
        shipped = {n.removeprefix(inside + "/") for n in listed if n.startswith(inside + "/")}
        assert shipped == data_files(src / folder), folder


@pytest.mark.slow
def test_installed_wheel_runs_outside_the_repository(built, tmp_path):
    src, wheel, digest = built
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "--ignore-installed", wheel)  # --ignore-installed: the system's memsim is visible too
    where, env = tmp_path / "elsewhere", clean_env(tmp_path / "cache")
    where.mkdir()
    memsim = tmp_path / "venv" / "bin" / "memsim"

    probe = ("import engine, json, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], engine.__file__, "
             "str(engine.DATA_DIR), str(engine.QUERIES_DIR), engine._compiled_sources_digest()]))")
    site, module, data, queries, installed_digest = json.loads(run([python, "-c", probe], where, env).stdout)
    site = Path(site).resolve()  # the venv's own site-packages
    assert Path(module).resolve() == site / "engine" / "__init__.py"
    assert (Path(data), Path(queries)) == (site / "engine" / "_data", site / "engine" / "_queries")
    assert installed_digest == digest  # the kernels' cache key reads the installed data files

    explained = run([memsim, "explain", "--model", "llama-3.1-8b"], where, env).stdout
    assert explained.startswith("llama-3.1-8b (8.03B params) on 1 x h100-sxm-80gb") and "device peak" in explained
    assert any((tmp_path / "cache" / "memsim" / "numba" / digest).iterdir())  # compiled kernels cached there

    listed = run([memsim, "query", "--list"], where, env).stdout
    names = sorted(p.stem for p in (src / "queries").glob("*.sql") if not p.stem.startswith("_"))
    assert [line.split()[0] for line in listed.splitlines()] == names

    # The dataset comes from this checkout's sweep (its kernel compiled already: a second compile of the sweep kernel
    # for the installed copy would add a minute); the installed memsim reads it through its own views and queries.
    (where / "tiny.toml").write_text(TINY_SPEC)
    run_sweep(where / "tiny.toml", where / "out", progress=False, say=lambda *_: None)
    assert (where / "out" / "_memsim.json").is_file() and list((where / "out").glob("part-*.parquet"))
    (summary,) = json.loads(run([memsim, "query", "summary", "--sweep", "out", "--format", "json"], where, env).stdout)
    assert summary["configurations"] == 16 and 0 < summary["fit"] <= summary["valid"] <= 16


@pytest.mark.slow
def test_editable_install_finds_the_files_through_importlib(built, tmp_path):
    src, _, _ = built
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "--ignore-installed", "-e", src)
    where, env = tmp_path / "elsewhere", clean_env(tmp_path / "cache")
    where.mkdir()
    probe = ("import engine, importlib.util, json; print(json.dumps([engine.__file__, str(engine.DATA_DIR), "
             "importlib.util.find_spec('engine._data').origin, importlib.util.find_spec('engine._queries').origin]))")
    module, data, data_origin, queries_origin = json.loads(run([python, "-c", probe], where, env).stdout)
    assert Path(module) == src / "engine" / "__init__.py" and Path(data) == src / "data"
    assert (Path(data_origin), Path(queries_origin)) == (src / "data" / "__init__.py", src / "queries" / "__init__.py")
    listed = run([tmp_path / "venv" / "bin" / "memsim", "query", "--list"], where, env).stdout
    assert "summary" in listed.split()


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    in_readme = readme[next(i for i, line in enumerate(readme) if line.startswith("# 2. run the tests")) + 1]
    in_ci = ci[ci.index("# --- the README's test command, verbatim ---") + 1]
    assert in_ci == in_readme and in_readme.endswith("python -m pytest")


def test_a_numba_cache_dir_the_user_sets_holds_the_kernels_under_their_sources_digest(tmp_path):
    # numba's own index keys a kernel by its function's file alone: a formula edited in another file, or another
    # inlining threshold, would load the old kernel (old numbers) from a directory shared across digests.
    env = os.environ | {"NUMBA_CACHE_DIR": str(tmp_path)}
    shown = run([sys.executable, "-c", "import engine.model, numba; print(numba.config.CACHE_DIR)"], REPO, env).stdout
    assert shown.strip() == str(tmp_path / "memsim" / engine._compiled_sources_digest())


def test_the_test_command_installs_the_versions_the_measured_sets_were_made_with():
    # The sets' replays skip under other versions (tests/measure_helpers.py): pinned, a new release cannot quietly
    # take them out of CI. Every *_version column of every committed set names the one pinned version.
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pinned = dict(requirement.split("==") for requirement in extras["test"] if "==" in requirement)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pinned["torch"] = re.search(r"# 2\. run the tests.*\n.*pip install torch==([\w.]+) ", readme).group(1)
    made = {}
    for path in sorted((REPO / "data" / "measured").glob("*.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for column, version in row.items():
                    if column.endswith("_version") and version:
                        made.setdefault(column.removesuffix("_version"), set()).add(version.split("+")[0])
    assert set(made) == {"torch", "transformers", "peft", "torchao", "bitsandbytes"}
    assert {name: {pinned.get(name)} for name in made} == made


def test_ci_runs_it_in_a_fresh_venv():
    # what the machine's own Python has installed (scipy, torchao) must never stand in for pyproject's extras
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    command = ci.index("# --- the README's test command, verbatim ---")
    made = next(i for i, line in enumerate(ci) if " -m venv " in line and "--system-site-packages" not in line)
    entered = next(i for i, line in enumerate(ci) if line.startswith(". ") and line.endswith('/bin/activate"'))
    assert made < entered < command
