"""Command-line spellings of the vocabulary: one flag per CONFIG.md input (`--seq-len` for seq_len), plus
`--gpu-memory`, the GPU's memory with a unit (24GiB, 80GB), which sets capacity_bytes for a card the catalog
lacks. A flag of a `*_bytes` input takes a unit too."""

import argparse
import re

from engine.errors import UserError
from engine.inputs.vocabulary import INPUT_FIELDS, is_choice, names, spell

DERIVED_DEFAULTS = {"n_gpus", "dp", "n_kv_heads", "head_dim", "n_params"}
# Inputs whose default is the catalog GPU's own value, which no single default spells
CATALOG_DEFAULTS = {"fp8_tensor_cores": "by the GPU's architecture", "bf16_tensor_cores": "by the GPU's architecture"}
# decimal units as vendors print them (an "80GB" card), binary ones as nvidia-smi and memsim do (GiB = 2^30)
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")
GPU_MEMORY_HELP = ("the GPU's memory with a unit (24GiB, 80GB, 24576MiB): sets capacity_bytes, for a card the "
                   "catalog lacks; --gpu names the catalog card whose overheads, speed and price it keeps")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per CONFIG.md input; the help names the default."""
    for f in INPUT_FIELDS:
        default = spell(f.name, f.default) if f.kind != "str" else f.default
        choices = f" ({'|'.join(names(f.kind))})" if is_choice(f) else ""
        if f.name in DERIVED_DEFAULTS and f.default == 0:
            default = "derived"
        default = CATALOG_DEFAULTS.get(f.name, default)
        extra = {"nargs": "?", "const": "true"} if f.kind == "bool" else {}
        text = f"{f.help}{choices}; default: {default}".replace("%", "%%")  # argparse formats help with %
        parser.add_argument(flag(f.name), dest=f.name, metavar="V", help=text, **extra)
    parser.add_argument("--gpu-memory", metavar="SIZE", help=GPU_MEMORY_HELP)


def size_bytes(name: str, text: str) -> str:
    """'24GiB' -> '25769803776', '80GB' -> '80000000000'; a plain number is bytes already (left to the vocabulary)."""
    if not re.search(r"[a-z]\s*$", str(text).lower()):
        return text
    found = SIZE.fullmatch(str(text).lower())
    if not found or found[2] not in UNITS:
        raise UserError(f"{name} takes a size such as 24GiB, 80GB or a number of bytes, got {text!r}")
    value = float(found[1]) * UNITS[found[2]]
    if value != int(value):
        raise UserError(f"{name} {text!r} is not a whole number of bytes")
    return str(int(value))


def given_config(args: argparse.Namespace) -> dict:
    """The inputs given on the command line, CONFIG.md name -> text (sizes with units as bytes). A flag given an
    empty value (`--model ""`, an unset shell variable) is a mistake, never the default."""
    given = {f.name: getattr(args, f.name) for f in INPUT_FIELDS if getattr(args, f.name, None) is not None}
    for name, value in [*given.items(), ("gpu_memory", getattr(args, "gpu_memory", None))]:
        if value is not None and not str(value).strip():
            raise UserError(f"{flag(name)} was given an empty value: give one, or leave the flag out for the default")
    for name in [n for n in given if n.endswith("_bytes")]:
        given[name] = size_bytes(flag(name), given[name])
    if getattr(args, "gpu_memory", None) is not None:
        if "capacity_bytes" in given:
            raise UserError("--gpu-memory and --capacity-bytes both set the GPU's memory: give one")
        if not re.search(r"[a-z]\s*$", args.gpu_memory.lower()):  # 80 is not 80 bytes, nor surely 80 GB
            raise UserError(f"--gpu-memory needs a unit: 80GB, 24GiB, 24576MiB (got {args.gpu_memory!r})")
        given["capacity_bytes"] = size_bytes("--gpu-memory", args.gpu_memory)
        if given["capacity_bytes"].strip() in ("0", ""):
            raise UserError(f"--gpu-memory must be more than 0, got {args.gpu_memory!r}")
    return given
