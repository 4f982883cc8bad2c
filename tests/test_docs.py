"""docs/config.md is what `python -m engine.cli.docs` prints, and it names every column of CONFIG.md."""

import re
import tomllib
from pathlib import Path

import pytest

from engine.cli import docs
from engine.configure.grid import build_grid
from engine.configure.spec import parse_spec
from engine.inputs import vocabulary as v
from engine.inputs.field import Field

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "config.md"
SHARED_CONFIG = REPO.parent / "shared" / "CONFIG.md"  # the public vocabulary, outside the repository

# The names in CONFIG.md's tables (and in the `name = value` its prose shows, e.g. `recipe`), as
# config_md_names() reads them. CONFIG.md lives outside the repository (../shared/CONFIG.md) and is absent in CI,
# so the tests below run on this copy; where CONFIG.md is present, test_config_names_copy_is_current checks the
# copy against it, so the copy cannot go stale unnoticed.
CONFIG_NAMES = [
    "act_fn", "activation_bytes", "activation_offload", "allocated_peak_bytes", "attention", "base_quant",
    "bottleneck", "capacity_bytes", "capacity_factor", "checkpoint_every", "checkpointing", "compile",
    "cost_per_mtok", "cp", "cublas_workspace_bytes", "cuda_context_bytes", "d_ff", "d_model", "device_peak_bytes",
    "dp", "dropout", "ep", "ffn_type", "first_dense_layers", "fits", "framework", "fused_projections", "gpu",
    "grad_accum", "grad_bytes", "head_dim", "headroom", "host_bytes", "host_ram_bytes", "index", "invalid_reason",
    "kv_lora_rank", "linear_bias", "lm_head", "lora_rank", "lora_targets", "loss_chunks", "loss_impl",
    "loss_parallel", "mfu", "micro_batch", "model", "moe_d_ff", "n_experts", "n_gpus", "n_heads", "n_kv_heads",
    "n_layers", "n_params", "n_positions", "n_shared_experts", "nccl_buffer_bytes", "norm_type", "norms_per_layer",
    "offload", "optimizer", "optimizer_bytes", "optimizer_impl", "optimizer_in_backward", "overhead_bytes", "paged",
    "peak_grad_bytes", "peak_optimizer_bytes", "peak_phase", "pp", "pp_first_layers", "pp_last_layers",
    "pp_schedule", "precision", "q_lora_rank", "qk_rope_head_dim", "recipe", "reserved_peak_bytes", "seq_len",
    "shared_expert_gate", "softmax_fp32", "sp", "step_time_s", "temp_bytes", "tied_embeddings", "tokens_per_gpu_s",
    "top_k", "tp", "v_head_dim", "valid", "vocab", "vpp", "weight_bytes", "zero_grad", "zero_stage",
]
# Names CONFIG.md has and the code does not implement yet. Each is an expected failure, strict: when one lands (and
# the page is regenerated) its case passes, the strict xfail fails, and the name comes off this list.
NOT_IMPLEMENTED: set = set()


def config_md_names(text: str) -> set[str]:
    """The column names of CONFIG.md: each table row's first cell (`a, b, c`, a parenthesis dropped), and the
    names its prose sets in code spans (`recipe = "torchtitan"`)."""
    found = set()
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        first = re.sub(r"\(.*?\)", "", line.split("|")[1])
        found |= {n.strip() for n in first.split(",") if re.fullmatch(r"[a-z][a-z0-9_]*", n.strip())}
    found |= set(re.findall(r"`([a-z][a-z0-9_]*) = ", text))
    return found - {"column"}  # the tables' header


def page_names(text: str) -> set[str]:
    """The names the page documents: the code span opening the first cell of each table row."""
    return set(re.findall(r"^\| `([a-z][a-z0-9_]*)` \|", text, flags=re.MULTILINE))


def test_committed_page_is_what_the_generator_prints():
    assert PAGE.read_text(encoding="utf-8") == docs.page(), f"docs/config.md is stale: run `{docs.REGENERATE}`"


def test_module_prints_the_page(capsys):
    docs.main()
    assert capsys.readouterr().out == docs.page()


@pytest.mark.skipif(not SHARED_CONFIG.is_file(), reason="../shared/CONFIG.md is not here (CI): the copy stands")
def test_config_names_copy_is_current():
    assert config_md_names(SHARED_CONFIG.read_text(encoding="utf-8")) == set(CONFIG_NAMES)


def test_config_names_reader_reads_table_rows_and_prose():
    text = "| column | type |\n|---|---|\n| tp, pp (sweeps) | int |\nA preset (`recipe = \"x\"`) sets several."
    assert config_md_names(text) == {"tp", "pp", "recipe"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="in CONFIG.md, not in the code yet"))
    if n in NOT_IMPLEMENTED else n
    for n in CONFIG_NAMES
])
def test_config_md_column_is_on_the_page(name):
    assert name in page_names(PAGE.read_text(encoding="utf-8"))


def test_every_input_and_output_is_on_the_page():
    from engine.model.outputs import OUTPUTS

    names = page_names(PAGE.read_text(encoding="utf-8"))
    assert set(v.INPUTS) - names == set() and set(OUTPUTS) - names == set()


def test_every_column_a_sweep_writes_is_on_the_page(sweep_frame):
    assert set(sweep_frame.columns) - page_names(PAGE.read_text(encoding="utf-8")) == set()


def test_page_example_spec_is_a_valid_spec():
    block = re.search(r"```toml\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)[1]
    assert build_grid(parse_spec(tomllib.loads(block))).total == 2 * 2 * 4 * 4 * 4 * 3


def test_generator_refuses_an_input_on_no_section(monkeypatch):
    monkeypatch.setitem(v.INPUTS, "new_knob", Field("new_knob", "int", 0, "a knob no section holds"))
    with pytest.raises(AssertionError, match="new_knob"):
        docs.page()


def test_categorical_input_lists_its_values_with_their_meaning():
    row = next(line for line in docs.page().splitlines() if line.startswith("| `checkpointing` |"))
    assert "`selective_op` (PyTorch selective activation checkpointing" in row and "`none`" in row


def test_output_registry_is_the_sweep_schema_and_the_outputs_view(sweep_dir, sweep_con):
    """A sweep's Parquet columns carry each output's registered type and nullability, and the SQL view `outputs`
    lists every output (engine/inputs/outputs.py is the one place they are declared)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.inputs.outputs import OUTPUT_COLUMNS

    schema = pq.read_schema(next(sweep_dir.glob("part-*.parquet")))
    arrow = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    for o in OUTPUT_COLUMNS:
        field = schema.field(o.name)
        assert (pa.types.is_dictionary(field.type) if o.dtype == "category" else field.type == arrow[o.dtype]), o
        assert field.nullable == o.nullable, o
    listed = sweep_con.sql("SELECT name, unit, level FROM outputs ORDER BY name").fetchall()
    assert listed == sorted((o.name, o.unit, o.level) for o in OUTPUT_COLUMNS)
