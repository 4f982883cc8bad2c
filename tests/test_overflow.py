"""No wrapped numbers: on huge configurations (every input up to its documented maximum) the kernel either agrees
with exact integer arithmetic (the formulas run as plain Python on Python ints) or says the configuration is too
large; it never answers with a number that wrapped. And the sweep kernel equals the scalar reference on 10^5
configurations drawn at random across the whole input ranges, extremes included, with a new seed every run
(MEMSIM_TEST_SEED=N replays one)."""

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import engine.model
from engine.catalogs import catalog
from engine.catalogs.recipes import preset_inputs, presets
from engine.configure.grid import build_grid, decode
from engine.configure.resolve import resolve_cases
from engine.configure.spec import parse_spec
from engine.dataset.chunks import SweepKernel
from engine.inputs.codes import Invalid
from engine.inputs.vocabulary import INPUTS, RECORD, names
from engine.model.kernel import UNSET, evaluate_compiled
from engine.model.outputs import OUTPUTS
from tests.support import outputs

pytestmark = pytest.mark.slow  # the compiled kernels: the fast tier never waits for a compiler

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
    evaluate_compiled(resolve_cases([{"model": "gpt2"}])[0])  # compile the kernel with the real arrays first
    import importlib
    import pkgutil

    from engine.catalogs import conventions

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
    got = evaluate_compiled(records)
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
    got = evaluate_compiled(records)
    assert got["fits"][0] == 0 and got["valid"][0] == 0 and got["invalid_reason"][0] == Invalid.TOO_LARGE


# --- the sweep kernel = the scalar reference, on random configurations across the whole input ranges ---------

SEED = int(os.environ.get("MEMSIM_TEST_SEED", random.SystemRandom().randrange(2**32)))
# each numeric axis: (usual values, extremes); a grid takes some usual values and each extreme at times
NUMBERS = {"n_gpus": ([8, 64], [1, 2**24]), "tp": ([1, 2, 8], [4096]), "pp": ([1, 2, 4], [4096]),
           "cp": ([1, 2], [4096]), "ep": ([1, 8], [4096]), "zero_stage": ([0, 1, 2, 3], []), "vpp": ([1, 2], [1024]),
           "seq_len": ([2048, 8192], [1, 2**31]), "micro_batch": ([1, 4], [2**20]), "grad_accum": ([1, 8], [2**20]),
           "lora_rank": ([0, 16], [2**20]), "loss_chunks": ([1, 8], [2**20]), "checkpoint_every": ([1, 2], [2**20]),
           "dropout": ([0.0, 0.1], [0.99]), "headroom": ([0.0, 0.1], [0.99]),
           "capacity_factor": ([1.0, 1.25], [0.01, 1024.0])}
CHOICE_AXES = ["pp_schedule", "precision", "optimizer", "framework", "checkpointing", "attention", "lora_targets",
               "base_quant", "offload", "optimizer_impl", "loss_impl", "zero_grad"]
FLAG_AXES = ["sp", "paged", "optimizer_in_backward", "activation_offload", "compile", "loss_parallel"]


@pytest.fixture(scope="module")
def huge_model(tmp_path_factory) -> str:
    """A config.json at the far end of the model dimensions (a million layers of width 2^20, 2^28 tokens)."""
    config = json.loads((Path(__file__).parent / "fixtures" / "hf_configs" / "llama-3.1-8b.json").read_text())
    config.update(num_hidden_layers=2**20, hidden_size=2**20, intermediate_size=2**24, vocab_size=2**28,
                  num_attention_heads=2**10, num_key_value_heads=2**10, max_position_embeddings=2**31)
    path = tmp_path_factory.mktemp("huge") / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def some(rng, values: list) -> list:
    """A random non-empty subset of `values`, in order."""
    picked = rng.choice(len(values), rng.integers(1, len(values) + 1), replace=False)
    return [values[i] for i in sorted(picked)]


def random_axes(rng, huge_model: str) -> dict:
    """A spec's axes: random models and GPUs, and a random choice of the other inputs, each over random values."""
    models = [str(m) for m in rng.choice(sorted(catalog.load_models()), 2, replace=False)]
    axes = {"model": models + [huge_model] * (rng.random() < 0.3),
            "gpu": [str(g) for g in rng.choice(sorted(catalog.load_gpus()), 2, replace=False)]}
    for name, (usual, extremes) in NUMBERS.items():
        if rng.random() < 0.6:
            axes[name] = sorted(some(rng, usual) + [x for x in extremes if rng.random() < 0.3])
    for name in CHOICE_AXES + FLAG_AXES:
        if rng.random() < 0.5:
            axes[name] = some(rng, [False, True] if name in FLAG_AXES else names(INPUTS[name].kind))
    if rng.random() < 0.4:
        recipes = some(rng, ["none", *presets()])
        preset = sorted({f for r in recipes for f in preset_inputs(r)})
        if preset:  # the recipe axis sets what the spec does not sweep itself: leave it at least one input
            axes.pop(preset[rng.integers(len(preset))], None)
            axes["recipe"] = recipes
    return axes


def sweep_and_records(grid, rng, count: int, run: int):
    """`count` configurations of the grid in runs of `run` at random places: the sweep kernel's outputs and the
    decoded records."""
    kernel, run = SweepKernel(grid, compiled=True), min(run, grid.total)
    starts = rng.integers(0, grid.total - run + 1, max(count // run, 1))
    got = {name: [] for name in OUTPUTS}
    for start in starts:
        chunk = kernel.evaluate(int(start), run)
        assert not any((part == UNSET).any() for part in (chunk.rank, chunk.gpu, chunk.step, chunk.device))
        for name in OUTPUTS:
            got[name].append(chunk.values(name).copy())
    records = np.zeros(len(starts) * run, dtype=RECORD).view(np.recarray)
    for i, index in enumerate((starts[:, None] + np.arange(run)).ravel()):
        records[i] = decode(grid, int(index))
    return {name: np.concatenate(parts) for name, parts in got.items()}, records


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b


@pytest.mark.parametrize("n_grids, per_grid", [(2, 500), pytest.param(40, 2500, marks=pytest.mark.slow)],
                         ids=["1e3", "1e5"])
def test_sweep_kernel_equals_the_scalar_reference_across_the_input_ranges(huge_model, n_grids, per_grid):
    rng = np.random.default_rng(SEED)
    seen = []
    for g in range(n_grids):
        axes = random_axes(rng, huge_model)
        grid = build_grid(parse_spec({"axes": axes}))
        got, records = sweep_and_records(grid, rng, per_grid, int(rng.integers(1, 64)))
        want = evaluate_compiled(records)  # the scalar reference (levels.evaluate_one) for every record, compiled
        for name in OUTPUTS:
            bad = np.flatnonzero(~same(got[name], want[name]))
            assert not bad.size, f"MEMSIM_TEST_SEED={SEED}, grid {g} {axes}: {name} differs at {bad[:5]}"
        for i in rng.choice(len(records), 2, replace=False):  # and called one record at a time
            reference = outputs(records[i])
            assert all(same(np.array(got[n][i]), np.array(reference[n])) for n in OUTPUTS), f"MEMSIM_TEST_SEED={SEED}"
        seen.append(want["invalid_reason"])
    reasons = np.concatenate(seen)
    assert len(reasons) >= n_grids * per_grid * 0.9
    if n_grids >= 10:  # the sample holds layouts that run, layouts that cannot and configurations too large to count
        assert {Invalid.OK, Invalid.TOO_LARGE} < set(reasons.tolist()), f"MEMSIM_TEST_SEED={SEED}"
