"""No wrapped numbers: on huge configurations (every input up to its documented maximum) the kernel either agrees
with exact integer arithmetic (the formulas run as plain Python on Python ints) or says the configuration is too
large; it never answers with a number that wrapped."""

from types import SimpleNamespace

import numpy as np
import pytest

import engine.model
from engine.inputs.codes import Invalid
from engine.inputs.resolve import resolve_cases
from engine.inputs.vocabulary import RECORD
from engine.model.kernel import evaluate
from tests.support import outputs

HUGE = dict(seq_len=[2**10, 2**17, 2**24, 2**31], micro_batch=[1, 64, 2**20], grad_accum=[1, 2**10, 2**20],
            n_gpus=[1, 2**12, 2**24], tp=[1, 8, 2**12], pp=[1, 16, 2**12], cp=[1, 2**12], ep=[1, 2**12],
            lora_rank=[0, 2**10, 2**20], zero_stage=[0, 1, 3], attention=["eager", "flash", "sdpa_math"],
            checkpointing=["none", "full", "selective"], precision=["fp32", "amp_bf16", "bf16", "fp8"],
            framework=["pytorch", "fsdp", "deepspeed", "megatron"], pp_schedule=["1f1b", "interleaved", "gpipe"],
            vpp=[1, 2**10], capacity_factor=[0.01, 1.0, 1024.0], headroom=[0.0, 0.99], dropout=[0.0, 0.5])
DIMS = dict(n_layers=[1, 2**10, 2**31], d_model=[64, 2**16, 2**31], n_heads=[1, 64, 2**31], d_ff=[64, 2**20, 2**31],
            vocab=[2, 2**17, 2**31], n_experts=[0, 64, 2**31], top_k=[0, 2, 8], moe_d_ff=[0, 2**12, 2**31])


def exact(rec) -> SimpleNamespace:
    """The record with Python ints and floats: the formulas, run unjitted on it, compute exactly."""
    return SimpleNamespace(**{name: rec[name].item() for name in RECORD.names})


class ExactTable:
    """A conventions array that hands out Python ints (numpy's int64 would wrap in the reference too)."""

    def __init__(self, array):
        self.array = array

    def __getitem__(self, key):
        return self.array[key].item()


@pytest.fixture
def exact_tables(monkeypatch):
    """The conventions tables (data/optimizers.toml, frameworks.toml), read as Python ints while the reference runs."""
    evaluate(resolve_cases([{"model": "gpt2"}])[0])  # compile the kernel with the real arrays first
    import importlib
    import pkgutil

    from engine.model import conventions

    tables = {name for name, value in vars(conventions).items() if isinstance(value, np.ndarray)}
    for info in pkgutil.iter_modules(engine.model.__path__):
        module = importlib.import_module(f"engine.model.{info.name}")
        for name in tables & set(vars(module)):
            monkeypatch.setattr(module, name, ExactTable(getattr(module, name)))


def random_huge_case(rng) -> dict:
    pick = lambda xs: xs[rng.integers(len(xs))]  # noqa: E731
    case = {name: pick(values) for name, values in HUGE.items()}
    if rng.random() < 0.5:
        case.update({name: pick(values) for name, values in DIMS.items()}, n_kv_heads=1, model="custom")
        case["n_heads"] = min(case["n_heads"], case["d_model"])
        case["top_k"] = min(case["top_k"], case["n_experts"])
    else:
        case["model"] = pick(["llama-3.1-405b", "deepseek-v3", "mixtral-8x22b", "gpt2", "kimi-k2"])
    return case


@pytest.mark.parametrize("seed", range(2))
def test_the_kernel_is_exact_or_says_too_large(seed, exact_tables):
    rng = np.random.default_rng(seed)
    cases = [random_huge_case(rng) for _ in range(300)]
    records, _, _ = resolve_cases(cases)
    got = evaluate(records)
    too_large = 0
    for i in range(len(records)):
        want = outputs(exact(records[i]))
        if want["invalid_reason"] == Invalid.TOO_LARGE:
            too_large += 1
        for name, value in want.items():
            if isinstance(value, float):  # time and cost: the same float arithmetic in both
                assert got[name][i] == value or (value != value and got[name][i] != got[name][i]), name
                continue
            assert int(got[name][i]) == value, f"{name} of case {cases[i]}: kernel {got[name][i]}, exact {value}"
            assert -1 <= value < 2**63, f"{name} of case {cases[i]} is {value}: the guard let it through"
    assert 0 < too_large < len(records)  # the sample has both kinds


def test_a_huge_configuration_never_fits():
    records, _, _ = resolve_cases([{"model": "llama-3.1-8b", "attention": "eager", "seq_len": 2**21,
                                    "micro_batch": 512, "n_gpus": 8, "zero_stage": 3}])
    got = evaluate(records)
    assert got["fits"][0] == 0 and got["valid"][0] == 0 and got["invalid_reason"][0] == Invalid.TOO_LARGE
