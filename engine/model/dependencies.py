"""Which configuration fields each level of the model reads, from the formulas' own code.

A formula reads the record as `c.<field>` and passes `c` on to the formulas it calls; following those calls
from `levels.rank_terms`, `levels.shape_terms`, `levels.step_terms` and `levels.gpu_terms` gives the fields each
level depends on. The sweep orders its axes by the shallowest level that reads them and re-evaluates a level only
when one of its axes moves, so this list is never kept by hand: a formula that starts reading a new field moves the
axis with it (tests/test_dependencies.py checks the analysis against perturbed configurations).
"""

import ast
import inspect
import textwrap
from functools import cache

from engine.model import levels

# device_terms reads no input
LEVELS = {"rank": levels.rank_terms, "shape": levels.shape_terms, "step": levels.step_terms, "device": levels.gpu_terms}


def _callee(node: ast.Call, namespace: dict):
    """The function a call names, when it is a plain name or module.attribute in the caller's globals."""
    f = node.func
    if isinstance(f, ast.Name):
        return namespace.get(f.id)
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return getattr(namespace.get(f.value.id), f.attr, None)
    return None


@cache
def fields_read(function) -> frozenset[str]:
    """Every `c.<field>` that `function` or a formula it calls (with `c`) reads."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    fn = tree.body[0]
    record = fn.args.args[0].arg if fn.args.args else None
    found: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == record:
            found.add(node.attr)
        elif isinstance(node, ast.Call):
            callee = _callee(node, function.__globals__)
            passes_record = any(isinstance(a, ast.Name) and a.id == record for a in node.args)
            if passes_record and inspect.isfunction(callee) and callee.__module__.startswith("engine.model"):
                found |= fields_read(callee)
    return frozenset(found)


def level_of_fields() -> dict[str, str]:
    """field -> the shallowest level that reads it ('rank', 'shape', 'step' or 'device').

    The sweep kernel fills the GPU table (gpu_terms for every device combination) once per rank slot, not once per
    step, so a field gpu_terms reads that is not a device attribute moves with the rank: `sp`, read by the step's
    activations and by the GPU's NCCL communicators, is a rank-level axis."""
    out: dict[str, str] = {}
    for level, function in LEVELS.items():
        for name in fields_read(function):
            out.setdefault(name, level)
    for name in fields_read(levels.gpu_terms):
        if out[name] in ("shape", "step"):
            out[name] = "rank"
    return out
