"""Command-line spellings of the vocabulary: one flag per CONFIG.md input (`--seq-len` for seq_len)."""

import argparse

from engine.inputs.vocabulary import INPUT_FIELDS, is_choice, names, spell

DERIVED_DEFAULTS = {"n_gpus", "dp", "n_kv_heads", "head_dim", "n_params"}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per CONFIG.md input; the help names the default."""
    for f in INPUT_FIELDS:
        default = spell(f.name, f.default) if f.kind != "str" else f.default
        choices = f" ({'|'.join(names(f.kind))})" if is_choice(f) else ""
        if f.name in DERIVED_DEFAULTS and f.default == 0:
            default = "derived"
        extra = {"nargs": "?", "const": "true"} if f.kind == "bool" else {}
        parser.add_argument(flag(f.name), dest=f.name, metavar="V", help=f"{f.help}{choices}; default: {default}", **extra)


def given_config(args: argparse.Namespace) -> dict:
    """The inputs given on the command line, CONFIG.md name -> text."""
    return {f.name: getattr(args, f.name) for f in INPUT_FIELDS if getattr(args, f.name, None) is not None}
