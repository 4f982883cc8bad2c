"""Hugging Face Hub ids resolved offline, through the local Hub cache.

`memsim explain --model Qwen/Qwen3-8B` finds the catalog entry through its `aliases`; an id the catalog does not
know is looked up where huggingface_hub keeps its downloads (its file_download.py layout):

    $HF_HUB_CACHE (else $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub)
        models--<owner>--<name>/refs/main            the commit the main branch pointed to when downloaded
        models--<owner>--<name>/snapshots/<commit>/config.json

Nothing is downloaded: without network access the cache is the only copy (HF_HUB_OFFLINE's behaviour). Nothing
outside the model's folder is read either: refs/main must name a snapshot (a commit hash, one path component) and
the config.json found must lie in the folder (a snapshot's files link to its blobs/), whatever a ref or a link says.
"""

import os
import re
from pathlib import Path

from engine.catalogs.hf_config import model_from_hf_config

# owner/name as the Hub spells repository ids (huggingface_hub.utils.validate_repo_id): letters, digits, - _ .
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
# what refs/main may name: a snapshot folder (huggingface_hub writes the commit's 40 hex digits), never a path
SNAPSHOT = re.compile(r"[\w-][\w.-]{0,127}")


def hub_cache_dir() -> Path:
    """The Hub cache directory huggingface_hub would use (constants.py: HF_HUB_CACHE, the legacy
    HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub)."""

    def env(name):
        value = os.environ.get(name)
        return Path(os.path.expandvars(value)).expanduser() if value else None

    home = env("HF_HOME") or (env("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return env("HF_HUB_CACHE") or env("HUGGINGFACE_HUB_CACHE") or home / "hub"


def _repo_folder(cache: Path, repo_id: str) -> Path | None:
    """models--owner--name, or its case-insensitive match (the Hub resolves ids case-insensitively)."""
    name = "models--" + repo_id.replace("/", "--")
    exact = cache / name
    if exact.is_dir():
        return exact
    if not cache.is_dir():
        return None
    matches = sorted(p for p in cache.glob("models--*") if p.name.lower() == name.lower() and p.is_dir())
    return matches[0] if matches else None


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path`, its links followed, is a file within `folder` (a repository folder of the cache)."""
    try:
        return path.is_file() and path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a link loop, an unreadable folder
        return False


def _snapshot_config(folder: Path) -> Path | None:
    """config.json of the snapshot refs/main names, else of the most recently written snapshot that has one; only
    a file within `folder` (a ref of '../..' or a link out of the cache is ignored)."""
    ref = folder / "refs" / "main"
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else ""
    except (OSError, UnicodeDecodeError):
        commit = ""
    if SNAPSHOT.fullmatch(commit):
        config = folder / "snapshots" / commit / "config.json"
        if _inside(config, folder):
            return config
    configs = [p for p in (folder / "snapshots").glob("*/config.json") if _inside(p, folder)]
    return max(configs, key=lambda p: p.stat().st_mtime) if configs else None


def cached_config(repo_id: str) -> Path | None:
    """The cached ``config.json`` of a Hub model id, or None when the id is not one or nothing is cached.

    Parameters
    ----------
    repo_id : str
        ``owner/name`` as on the Hub, e.g. ``Qwen/Qwen3-8B`` (any case).

    Examples
    --------
    >>> cached_config("not a hub id") is None
    True
    """
    repo_id = str(repo_id).strip()
    if not HUB_ID.fullmatch(repo_id):
        return None
    folder = _repo_folder(hub_cache_dir(), repo_id)
    return _snapshot_config(folder) if folder is not None else None


def model_from_hub_cache(repo_id: str) -> dict | None:
    """Model fields of a Hub id from its cached config.json (engine.catalogs.hf_config), with ``source`` the file;
    None when nothing is cached for it.

    Examples
    --------
    >>> model_from_hub_cache("nobody/no-such-model-here") is None
    True
    """
    config = cached_config(repo_id)
    return None if config is None else {"source": str(config)} | model_from_hf_config(config)
