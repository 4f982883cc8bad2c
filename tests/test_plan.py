"""`memsim plan`: the fastest configurations that fit, from the sweep kernel, each re-explained to the same numbers;
issue #22's targets on cases held out of its text."""

import json
import math

import numpy as np
import pytest

from engine.ask.explain import explain
from engine.ask.plan import PlanRequest, plan
from engine.ask.plan_search import plan_grid
from engine.ask.plan_space import build_spaces
from engine.ask.plan_text import render
from engine.cli import main
from engine.configure.grid import decode
from engine.configure.resolve import resolve_case
from engine.dataset.chunks import SweepKernel
from engine.model.kernel import evaluate_compiled
from engine.model.outputs import OUTPUTS
from tests.support import TINY_MODEL, outputs

pytestmark = pytest.mark.slow  # the compiled kernels: the fast tier never waits for a compiler

SMALL = {**TINY_MODEL, "n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 128, "vocab": 256,
         "seq_len": 256, "gpu": "rtx-4090"}


@pytest.fixture(scope="module")
def seventy_on_64_h100():
    request = PlanRequest({"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb", "seq_len": 8192}, n_gpus=(64,),
                          global_batch=64, top=3)
    return plan(request)


@pytest.fixture(scope="module")
def thirteen_on_one_a100():
    return plan(PlanRequest({"model": "llama-2-13b", "gpu": "a100-sxm-80gb"}, n_gpus=(1,), top=3))


@pytest.fixture(scope="module")
def seventy_on_two_4090s():
    return plan(PlanRequest({"model": "llama-3.1-70b", "gpu": "rtx-4090"}, n_gpus=(2,), method="any", top=3))


def comparable(value):
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


# --- the targets ---------------------------------------------------------------------------------------------


def test_the_best_70b_plan_on_64_h100_is_at_least_as_fast_as_torchtitan_with_full_recompute(seventy_on_64_h100):
    best = seventy_on_64_h100["plans"][0]["outputs"]
    base = {"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb", "n_gpus": 64, "seq_len": 8192, "recipe": "torchtitan",
            "checkpointing": "full"}
    # torchtitan's layouts at the same global batch of 64: FSDP over all 64, or TP 8 x FSDP 8 (micro-batch 8 or 1 x 8)
    titan = [explain({**base, **layout})["outputs"] for layout in
             ({}, {"tp": 8, "micro_batch": 8}, {"tp": 8, "grad_accum": 8})]
    fitting = [t["tokens_per_gpu_s"] for t in titan if t["fits"]]
    assert fitting and best["fits"] and best["tokens_per_gpu_s"] >= max(fitting)


def test_a_13b_full_training_plan_fits_on_one_a100_80gb(thirteen_on_one_a100):
    plans = thirteen_on_one_a100["plans"]
    assert plans and all(p["outputs"]["fits"] and p["inputs"]["lora_rank"] == 0 for p in plans)
    assert thirteen_on_one_a100["yours"]["fits"] is False  # the default configuration does not


def test_70b_with_method_any_fits_on_two_rtx_4090(seventy_on_two_4090s):
    best = seventy_on_two_4090s["plans"][0]
    assert best["outputs"]["fits"] and best["inputs"]["n_gpus"] == 2
    assert best["inputs"]["lora_rank"] > 0  # full training of 70B cannot fit 2 x 24 GB


# --- what a plan is ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("found", ["seventy_on_64_h100", "thirteen_on_one_a100", "seventy_on_two_4090s"])
def test_each_plan_re_explained_gives_the_same_numbers(found, request):
    for p in request.getfixturevalue(found)["plans"]:
        assert explain(p["inputs"])["outputs"] == p["outputs"]


def test_plans_fit_fastest_first_and_differ_in_speed(seventy_on_64_h100):
    rates = [p["outputs"]["tokens_per_gpu_s"] for p in seventy_on_64_h100["plans"]]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True) and len(set(rates)) == 3
    assert all(p["outputs"]["fits"] for p in seventy_on_64_h100["plans"])


def test_a_plan_keeps_the_global_batch(seventy_on_64_h100):
    for p in seventy_on_64_h100["plans"]:
        i = p["inputs"]
        assert i["micro_batch"] * i["grad_accum"] * i["dp"] == 64 and i["dp"] * i["tp"] * i["pp"] * i["cp"] == 64


def test_method_keep_never_switches_the_training_method(seventy_on_64_h100, thirteen_on_one_a100):
    for found in (seventy_on_64_h100, thirteen_on_one_a100):
        assert all(p["inputs"]["lora_rank"] == 0 and p["inputs"]["base_quant"] == "none" for p in found["plans"])


def test_changes_list_exactly_what_differs_from_the_users_configuration(thirteen_on_one_a100):
    user = thirteen_on_one_a100["user"]
    for p in thirteen_on_one_a100["plans"]:
        differs = {name for name, old, new in p["changes"]}
        assert differs == {n for n in differs if p["inputs"][n] != user[n]}
        assert all(p["inputs"][n] == user[n] for n in ("seq_len", "optimizer", "compile") )


def test_the_plan_searches_a_million_configurations_for_a_70b_on_64_gpus(seventy_on_64_h100):
    assert seventy_on_64_h100["searched"] >= 900_000 and seventy_on_64_h100["fitting"] > 0


def test_unneeded_changes_are_put_back(thirteen_on_one_a100):
    # the search tries only the fused optimizer step (never heavier); the plan keeps the user's foreach where it fits
    assert all(p["inputs"]["optimizer_impl"] == "foreach" for p in thirteen_on_one_a100["plans"])


def test_rank_by_cost_orders_plans_by_dollars_per_token():
    found = plan(PlanRequest({"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb"}, n_gpus=(8, 16), global_batch=16,
                             rank_by="cost", top=3))
    costs = [p["outputs"]["cost_per_mtok"] for p in found["plans"]]
    assert costs == sorted(costs) and {p["inputs"]["n_gpus"] for p in found["plans"]} <= {8, 16}


# --- nothing fits ---------------------------------------------------------------------------------------------


def test_nothing_fits_says_what_is_closest_and_why():
    found = plan(PlanRequest({"model": "llama-3.1-405b", "gpu": "rtx-4090"}, n_gpus=(1,), top=3))
    assert found["plans"] == [] and found["closest"]
    closest = found["closest"][0]["outputs"]
    assert not closest["fits"] and closest["valid"]
    text = render(found)
    assert "NOTHING FITS" in text and "over the usable memory" in text and "--n-gpus" in text


# --- the kernel -----------------------------------------------------------------------------------------------


def kernel_against_reference(grid, indices):
    chunk = SweepKernel(grid, compiled=True).evaluate(0, grid.total)
    got = {name: chunk.values(name) for name in OUTPUTS}
    for i in indices:
        want = outputs(decode(grid, int(i)))
        assert {n: comparable(v[i]) for n, v in got.items()} == {n: comparable(v) for n, v in want.items()}, int(i)


def test_kernel_equals_reference_for_every_candidate_of_a_one_gpu_plan():
    # every candidate against the scalar reference compiled (kernel.evaluate_compiled; tests/test_kernel.py holds the
    # compiled reference to the Python one)
    rec, _, _ = resolve_case({**SMALL, "n_gpus": 1})
    (space,) = build_spaces(rec, [1], 2, "keep")
    grid = plan_grid(space, rec, "llama-3.1-8b", "rtx-4090")
    assert grid.total > 1000
    chunk = SweepKernel(grid, compiled=True).evaluate(0, grid.total)
    want = evaluate_compiled(np.concatenate([np.asarray(decode(grid, i)).reshape(1) for i in range(grid.total)]))
    for name in OUTPUTS:
        got = chunk.values(name)
        same = (got == want[name]) | (np.isnan(got) & np.isnan(want[name])) if got.dtype.kind == "f" else got == want[name]
        assert same.all(), f"{name} differs at {np.flatnonzero(~same)[:5]}"


def test_kernel_equals_reference_on_candidates_of_a_multi_gpu_plan():
    rec, _, _ = resolve_case({**SMALL, "n_gpus": 8})
    rng = np.random.default_rng(22)
    for space in build_spaces(rec, [8], 8, "any"):
        grid = plan_grid(space, rec, "llama-3.1-8b", "rtx-4090")
        kernel_against_reference(grid, rng.choice(grid.total, min(grid.total, 60), replace=False))


def test_a_plan_grid_holds_the_users_model_and_gpu_overrides():
    rec, _, _ = resolve_case({**SMALL, "n_gpus": 2, "capacity_bytes": 8 * 2**30, "dropout": 0.1})
    grid = plan_grid(build_spaces(rec, [2], 2, "keep")[0], rec, "llama-3.1-8b", "rtx-4090")
    first = decode(grid, 0)
    assert (first.d_model, first.capacity_bytes, first.dropout) == (64, 8 * 2**30, 0.1)


# --- the command ----------------------------------------------------------------------------------------------


def test_plan_json_is_a_list_of_inputs_and_outputs(capsys):
    assert main(["plan", "--model", "llama-3.2-1b", "--gpu", "a100-sxm-80gb", "--n-gpus", "1", "--top", "2",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found) == 2 and all(set(p) == {"inputs", "outputs"} for p in found)
    assert found[0]["inputs"]["model"] == "llama-3.2-1b" and found[0]["outputs"]["fits"] is True


def test_plan_text_names_speed_price_memory_and_changes(capsys):
    assert main(["plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--n-gpus", "1", "--top", "1"]) == 0
    text = capsys.readouterr().out
    for words in ("tokens/s per GPU", "MFU", "step", "per million tokens", "to spare", "memsim explain --model"):
        assert words in text, words


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "llama-3.2-1b"],  # no --n-gpus
    ["plan", "--model", "llama-3.2-1b", "--n-gpus", "eight"],
    ["plan", "--model", "llama-3.2-1b", "--n-gpus", "8", "--rank-by", "speed"],
    ["plan", "--model", "llama-3.2-1b", "--n-gpus", "8", "--tokens", "-1"],
    ["plan", "--model", "llama-3.2-1b", "--n-gpus", "8", "--global-batch", "0"],
    ["plan", "--model", "llama-3.2-1b", "--n-gpus", "8", "--top", "0"],
    ["plan", "--model", "no-such-model", "--n-gpus", "8"],
])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    try:
        status = main(argv)
    except SystemExit as done:  # argparse's own refusals (a choice it does not know) exit from inside the parser
        status = done.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memsim: error") and "\n" not in err
