"""The kernels are the vectorized form of the scalar reference: equal, exactly, on random configurations."""

import numpy as np
import pytest

from engine.catalogs import catalog
from engine.configure.grid import build_grid, decode
from engine.configure.resolve import architectures, resolve_cases
from engine.configure.spec import parse_spec
from engine.dataset.chunks import SweepKernel
from engine.model.kernel import UNSET, evaluate_compiled, evaluate_reference
from engine.model.outputs import OUTPUTS
from tests.support import outputs, random_case

pytestmark = pytest.mark.slow  # the compiled kernels: the fast tier never waits for a compiler

def comparable(value):
    """A kernel value as a Python number, NaN as None (NaN != NaN)."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and value != value else value


def reference_outputs(records) -> dict[str, np.ndarray]:
    """Each record through the scalar reference (levels.evaluate_one), in plain Python."""
    rows = [outputs(records[i]) for i in range(len(records))]
    return {name: np.array([row[name] for row in rows]) for name in OUTPUTS}


# The fast tier draws a few configurations (the scalar reference runs in plain Python); the slow tier, many more.
SAMPLES = [pytest.param(0, 120, id="fast"), pytest.param(1, 400, id="more", marks=pytest.mark.slow)]


@pytest.mark.parametrize("seed, n", SAMPLES)
def test_estimate_kernel_equals_reference_on_random_configurations(seed, n):
    rng = np.random.default_rng(seed)
    records, _, _ = resolve_cases([random_case(rng) for _ in range(n)])
    got = evaluate_compiled(records)
    assert not any((v == UNSET).any() or np.isinf(v).any() for v in got.values()), "a column the kernel never wrote"
    want = reference_outputs(records)
    fast = evaluate_reference(records)  # what explain and small case lists run: the same reference on Python ints
    for name in OUTPUTS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        np.testing.assert_array_equal(fast[name], want[name], err_msg=name)


@pytest.mark.parametrize("seed, n", SAMPLES)
def test_sweep_kernel_equals_reference_on_random_grids(seed, n):
    rng = np.random.default_rng(100 + seed)
    models, gpus = list(catalog.load_models()), catalog.load_gpus()
    fp8 = {True: [], False: []}  # one GPU that runs fp8 and one that cannot: the device level's validity both ways
    for key, entry in gpus.items():
        fp8[architectures()[entry["arch"]]["fp8_tensor_cores"]].append(key)
    axes = {
        "model": list(rng.choice(models, 3, replace=False)), "gpu": [rng.choice(fp8[True]), rng.choice(fp8[False])],
        "n_gpus": [8, 32], "tp": [1, 2, 8], "zero_stage": [0, 3], "precision": ["amp_bf16", "bf16", "fp32", "fp8"],
        "lora_rank": [0, 16], "micro_batch": [1, 4], "seq_len": [1024, 8192], "checkpointing": ["none", "full"],
        "attention": ["eager", "flash"], "sp": [False, True], "headroom": [0.1, 0.2],
        "optimizer_impl": ["foreach", "fused"], "loss_impl": ["standard", "chunked", "fused_linear"],
        "activation_offload": [False, True], "compile": [False, True], "recipe": ["none", "torchtitan"],
    }
    grid = build_grid(parse_spec({"axes": axes}))
    start = int(rng.integers(0, grid.total // 2))
    count = min(3000, grid.total - start)
    chunk = SweepKernel(grid, compiled=True).evaluate(start, count)
    assert not any((part == UNSET).any() for part in (chunk.rank, chunk.gpu, chunk.step, chunk.device))
    got = {name: chunk.values(name) for name in [*OUTPUTS, "dp", "n_gpus"]}
    for i in rng.choice(count, n, replace=False):
        rec = decode(grid, start + i)
        want = outputs(rec) | {"dp": rec.dp, "n_gpus": rec.n_gpus}
        assert {n: comparable(v[i]) for n, v in got.items()} == {n: comparable(v) for n, v in want.items()}, \
            f"index {start + i}"


def test_a_small_sweep_in_python_stores_what_the_kernel_stores():
    """A sweep of a few hundred rows runs the scalar reference in Python (no compile); its chunk holds exactly the
    kernel's values, slot for slot."""
    axes = {"model": ["llama-3.2-1b", "mixtral-8x7b"], "gpu": ["h100-sxm-80gb", "rtx-4090", "a100-sxm-80gb"],
            "n_gpus": [1, 8], "zero_stage": [0, 3], "micro_batch": [1, 4], "checkpointing": ["none", "full"],
            "lora_rank": [0, 16], "precision": ["amp_bf16", "fp8"]}  # fp8 on the A100: invalid on the device level
    grid = build_grid(parse_spec({"axes": axes}))
    start, count = 5, grid.total - 9  # slots cut at both ends
    python, kernel = (SweepKernel(grid, compiled=c).evaluate(start, count) for c in (False, True))
    for name in [*OUTPUTS, "dp", "n_gpus"]:
        np.testing.assert_array_equal(python.values(name), kernel.values(name), err_msg=name)


def test_the_rank_reaches_the_step_as_a_record_of_its_every_field():
    """The kernel hands the step a Rank stored as a record (sweep_kernel.RANK_RECORD): every field, in the
    NamedTuple's order, holds the scalar reference's value, down to a parameter count past 2^32."""
    from engine.model.kernel import PlainRecord
    from engine.model.levels import Rank, rank_terms
    from engine.model.sweep_kernel import block_scratch, store_rank

    rng = np.random.default_rng(7)
    cases = [random_case(rng) for _ in range(40)] + [{"model": "llama-3.1-405b", "n_gpus": 8}]
    records, _, _ = resolve_cases(cases)
    _, _, ranks, words, *_ = block_scratch(1)
    for rec in records:
        r = rank_terms(PlainRecord(rec))
        store_rank(r, words[0])
        stored = ranks[0]
        assert [stored["columns"][name] for name in r.columns._fields] == list(r.columns)
        fields = Rank._fields[1:]
        assert {name: stored[name] for name in fields} == {name: getattr(r, name) for name in fields}
    assert stored["params"] > 2**32
