"""Shared test helpers: a configuration record from keyword overrides (Megatron's `_make_args`)."""

import numpy as np

from engine.configure.resolve import resolve_case
from engine.inputs.vocabulary import RECORD
from engine.model.levels import evaluate_one

TINY_MODEL = dict(n_layers=2, d_model=8, n_heads=2, n_kv_heads=2, d_ff=32, vocab=16, ffn_type="swiglu")


def config(**overrides):
    """A resolved record: the tiny model and memsim's defaults, with overrides in CONFIG.md names."""
    base = {} if "model" in overrides else TINY_MODEL
    case = {**base, "gpu": "h100-sxm-80gb", **overrides}
    rec, _, _ = resolve_case(case)
    return np.array([rec], dtype=RECORD).view(np.recarray)[0]


def outputs(c) -> dict[str, int]:
    """Every output column of one record, by name, from the scalar reference (levels.evaluate_one)."""
    r, s, g, d = evaluate_one(c)
    return {**r.columns._asdict(), **s.columns._asdict(), **g.columns._asdict(), **d.columns._asdict(),
            **d.times._asdict()}


def reference(formula):
    """The plain-Python body of a formula (formulas are plain functions that numba also compiles)."""
    return getattr(formula, "py_func", formula)
