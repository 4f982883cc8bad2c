"""Helpers the peer re-derivations share."""

def python_body(formula):
    """The plain-Python body of a memsim formula (no numba compile for a one-off comparison)."""
    return getattr(formula, "py_func", formula)


def n_gpus(c) -> int:
    """Total GPUs: n_gpus, else dp * tp * pp * cp (CONFIG.md)."""
    return int(c.n_gpus) if c.n_gpus > 0 else max(int(c.dp), 1) * c.tp * c.pp * c.cp


def dp_size(c) -> int:
    """Data-parallel ranks N: dp, else n_gpus / (tp * pp * cp)."""
    return int(c.dp) if c.dp > 0 else n_gpus(c) // (c.tp * c.pp * c.cp)


def record(**fields):
    """A memsim record from CONFIG.md names and values ('swiglu', True, 8, ...), without the catalogs."""
    from engine.inputs.codes import CHOICES, name_of
    from engine.inputs.vocabulary import empty_records

    c = empty_records(1)[0]
    for name, value in fields.items():
        if name in ("model", "gpu"):
            continue
        if isinstance(value, str):
            value = next(m for m in CHOICES[name] if name_of(m) == value)
        c[name] = value
    if c.dp == 0:
        c.dp = dp_size(c)
    return c
