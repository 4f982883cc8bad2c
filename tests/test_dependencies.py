"""The sweep re-evaluates a level only when one of its axes moves, so the fields each level reads (read from the
formulas' code) must be complete: changing a field the analysis says a level does not read never changes it."""

import numpy as np
import pytest

from engine.inputs.vocabulary import INPUTS, RECORD
from engine.model.dependencies import LEVELS, fields_read, level_of_fields
from engine.model.levels import gpu_terms, rank_terms, shape_terms, step_terms
from tests.support import config

# Values to move each input to: far from the defaults, so that a term that reads it changes.
MOVES = {"seq_len": 8192, "micro_batch": 4, "grad_accum": 8, "checkpointing": 2, "attention": 0, "sp": 1, "tp": 2,
         "pp": 2, "dp": 4, "n_gpus": 16, "zero_stage": 3, "precision": 3, "framework": 2, "optimizer": 4, "paged": 1,
         "lora_rank": 16, "headroom": 0.3, "capacity_bytes": 10**9, "cuda_context_bytes": 10**9,
         "nccl_buffer_bytes": 10**9, "host_ram_bytes": 10**6, "offload": 1, "dropout": 0.1, "cp": 2, "ep": 2,
         "capacity_factor": 2.0, "vpp": 2, "pp_schedule": 1}
BASES = [{"model": "llama-3.1-8b", "n_gpus": 8},
         {"model": "mixtral-8x7b", "n_gpus": 16, "zero_stage": 1, "attention": "eager"},
         {"model": "gpt2", "n_gpus": 4, "dropout": 0.1, "precision": "fp32"},
         {"model": "llama-3.1-8b", "n_gpus": 32, "tp": 16}]  # TP across nodes: sp changes its communicators


def moved(c, name, value):
    out = np.array([c], dtype=RECORD).view(np.recarray)[0]
    out[name] = value
    return out


def test_every_level_reads_something_and_nothing_unknown():
    for level, function in LEVELS.items():
        read = fields_read(function)
        assert read, level
        assert read <= set(RECORD.names), f"{level} reads fields that are not inputs: {read - set(RECORD.names)}"


@pytest.mark.parametrize("base", BASES, ids=[f"{b['model']}-{b['n_gpus']}" for b in BASES])
@pytest.mark.parametrize("name", sorted(MOVES))
def test_a_level_does_not_change_when_a_field_it_does_not_read_moves(base, name):
    c = config(**base)
    c2 = moved(c, name, MOVES[name])
    level = level_of_fields().get(name)
    r, r2 = rank_terms(c), rank_terms(c2)
    if level != "rank":
        assert r == r2, f"rank_terms changed with {name}, which the analysis says it does not read"
    if level not in ("rank", "shape"):
        assert shape_terms(c, r) == shape_terms(c2, r), f"shape_terms changed with {name}"
    if level not in ("rank", "shape", "step"):
        sh = shape_terms(c, r)
        assert step_terms(c, r, sh) == step_terms(c2, r, sh), f"step_terms changed with {name}"
    if level not in ("rank", "device"):  # the kernel fills the GPU table once per rank, not per step
        assert gpu_terms(c, r) == gpu_terms(c2, r), f"gpu_terms changed with {name}"


def test_the_analysis_sees_what_each_level_reads():
    # Workload fields are read by the shape and step levels (micro_batch and seq_len by the step alone), GPU
    # attributes by the GPU level, the layout by the rank level.
    levels = level_of_fields()
    assert levels["seq_len"] == levels["micro_batch"] == "step"
    assert levels["checkpointing"] == levels["grad_accum"] == "shape"
    assert levels["capacity_bytes"] == levels["headroom"] == "device"
    assert levels["tp"] == levels["zero_stage"] == levels["n_layers"] == "rank"
    assert set(MOVES) <= set(INPUTS)
