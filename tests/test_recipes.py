"""Training-recipe presets (data/recipes.toml): one name sets several inputs, explicit inputs win, and a sweep's
`recipe` axis gives the numbers explain gives for the same case."""

import polars as pl
import pytest

from engine.ask.estimate import estimate_table
from engine.ask.explain import evaluate_case
from engine.catalogs.recipes import presets
from engine.cli import main
from engine.configure.resolve import resolve_case
from engine.dataset.views import connect
from engine.errors import UserError
from engine.inputs.codes import Ckpt, Framework, OptimizerImpl
from tests.dataset_helpers import sweep_rows, swept


def test_every_preset_cites_its_source_and_sets_valid_inputs():
    assert {"torchtitan", "torchtune-full", "torchtune-lora", "torchtune-qlora", "hf-trainer",
            "deepspeed-zero-offload", "megatron"} <= set(presets())
    for name, preset in presets().items():
        assert preset["inputs"] and len(preset["source"]) > 40, name
        assert evaluate_case({"model": "llama-3.1-8b", "recipe": name, "n_gpus": 8})["valid"] == 1, name


def test_a_preset_sets_its_inputs_and_explicit_inputs_win():
    titan, _, _ = resolve_case({"recipe": "torchtitan", "n_gpus": 8})
    assert (titan.framework, titan.zero_stage, titan.checkpointing) == (Framework.FSDP, 3, Ckpt.SELECTIVE_OP)
    assert titan.optimizer_impl == OptimizerImpl.FUSED
    mine, _, _ = resolve_case({"recipe": "torchtitan", "n_gpus": 8, "optimizer_impl": "foreach", "zero_stage": 2})
    assert (mine.optimizer_impl, mine.zero_stage, mine.checkpointing) == (OptimizerImpl.FOREACH, 2, Ckpt.SELECTIVE_OP)


def test_an_unknown_recipe_is_one_line_naming_the_presets(capsys):
    with pytest.raises(UserError, match="torchtitan"):
        resolve_case({"recipe": "torchtitanic"})
    assert main(["explain", "--recipe", "torchtitanic"]) == 2
    err = capsys.readouterr().err.strip()
    assert "torchtitanic" in err and "\n" not in err


def test_a_recipe_axis_gives_what_explain_gives_and_swept_inputs_win(tmp_path):
    spec = ('[axes]\nmodel = ["llama-3.1-8b"]\nrecipe = ["none", "torchtitan", "torchtune-full"]\n'
            'n_gpus = [1, 8]\noptimizer_impl = ["foreach", "fused"]\n')
    rows = sweep_rows(swept(tmp_path, spec))
    assert rows.height == 12
    for row in rows.iter_rows(named=True):
        case = {"model": "llama-3.1-8b", "recipe": row["recipe"], "n_gpus": row["n_gpus"],
                "optimizer_impl": row["optimizer_impl"]}
        assert row["allocated_peak_bytes"] == evaluate_case(case)["allocated_peak_bytes"], case
    titan = rows.filter(pl.col("recipe") == "torchtitan", pl.col("n_gpus") == 1)
    assert titan["allocated_peak_bytes"].n_unique() == 2  # foreach and fused differ: the axis, not the preset, set it


def test_a_recipe_axis_writes_every_input_its_preset_sets(tmp_path):
    # issue #22: a sweep of recipe = "torchtitan" said framework = pytorch (the views' default for an input the spec
    # does not name); each preset's inputs are now columns of their own, the swept optimizer_impl still winning
    spec = ('[axes]\nmodel = ["llama-3.1-8b"]\nrecipe = ["none", "torchtitan", "megatron"]\n'
            'optimizer_impl = ["foreach", "fused"]\n')
    con = connect(swept(tmp_path, spec), read_only=True)
    rows = con.sql("SELECT DISTINCT recipe, framework, zero_stage, checkpointing, loss_parallel, sp FROM sweep "
                   "ORDER BY recipe").fetchall()
    assert rows == [("megatron", "megatron", 1, "selective", True, True), ("none", "pytorch", 0, "none", False, False),
                    ("torchtitan", "fsdp", 3, "selective_op", True, False)]
    impls = con.sql("SELECT DISTINCT optimizer_impl FROM sweep WHERE recipe = 'torchtitan' ORDER BY 1").fetchall()
    assert impls == [("foreach",), ("fused",)]  # swept: the axis wins over the preset's fused


def test_a_linked_recipe_axis_keeps_its_preset_columns(tmp_path):
    spec = ('[axes]\nmodel = ["llama-3.1-8b"]\nrecipe = ["hf-trainer", "torchtitan"]\nn_gpus = [1, 8]\n'
            '[link]\nrun = ["recipe", "n_gpus"]\n')
    rows = sweep_rows(swept(tmp_path, spec))
    assert rows.select("recipe", "n_gpus", "framework").sort("recipe").rows() == [("hf-trainer", 1, "pytorch"),
                                                                                 ("torchtitan", 8, "fsdp")]


def test_estimate_writes_what_a_preset_sets(tmp_path):
    table = estimate_table([{"model": "llama-3.1-8b", "recipe": "torchtitan", "n_gpus": 8}])
    row = table.to_pylist()[0]
    assert (row["recipe"], row["framework"], row["optimizer_impl"], row["loss_parallel"]) == (
        "torchtitan", "fsdp", "fused", True)
