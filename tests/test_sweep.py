"""The sweep end to end: Parquet that DuckDB and polars read back as `memsim estimate` computes the same
configurations; a sweep that cannot complete leaves nothing that looks complete; bad specs are one line."""

import errno
import io
import re
import tomllib

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from engine.ask.estimate import estimate_table
from engine.dataset.sweep import run_sweep
from engine.dataset.views import connect
from engine.errors import UserError
from engine.model.outputs import OUTPUTS

AXES = ["model", "gpu", "n_gpus", "tp", "pp", "zero_stage", "micro_batch", "seq_len", "checkpointing", "lora_rank", "attention"]


def test_sweep_rows_equal_estimate_on_the_same_configurations(sweep_dir, sweep_frame):
    sample = sweep_frame.filter(pl.col("index") % 37 == 0)
    cases = sample.select(AXES).to_dicts()
    est = pl.from_arrow(estimate_table(cases)).with_columns(pl.col(pl.Categorical).cast(pl.String))
    for column in OUTPUTS:
        assert sample[column].to_list() == est[column].to_list(), column
    assert sample["dp"].to_list() == est["dp"].to_list()


def test_duckdb_and_polars_read_the_same_rows(sweep_dir, sweep_frame):
    con = duckdb.connect()
    got = con.sql(f"SELECT index, device_peak_bytes, fits FROM read_parquet('{sweep_dir}/part-*.parquet') ORDER BY index").pl()
    assert got["index"].to_list() == list(range(len(sweep_frame)))
    assert got["device_peak_bytes"].to_list() == sweep_frame.sort("index")["device_peak_bytes"].to_list()


def test_parquet_footer_carries_spec_and_versions(sweep_dir):
    meta = pq.read_schema(next(sweep_dir.glob("part-*.parquet"))).metadata[b"memsim"].decode()
    assert '"spec_digest"' in meta and '"catalog_version"' in meta and '"memsim_version"' in meta and "[axes]" in meta


def spec_file(tmp_path, axes: str, extra: str = ""):
    path = tmp_path / "spec.toml"
    path.write_text(f"[axes]\n{axes}\n{extra}")
    return path


@pytest.mark.slow  # its second sweep runs the compiled kernel
def test_sweep_says_what_its_time_includes_and_when_the_kernel_compiles(tmp_path, monkeypatch, memsim):
    from engine.dataset import chunks

    spec = spec_file(tmp_path, 'model = ["llama-3.2-1b"]\nmicro_batch = [1, 2]')
    code, out, err = memsim("sweep", spec, "-o", tmp_path / "small", "--quiet")  # a few rows: Python, no compile
    assert code == 0 and "compiling" not in err + out
    assert re.search(r"2 configurations in [\d.]+ s of evaluating and writing \([\d.]+ M/s; [\d.]+ s in all, with reading "
                     r"the spec\): 2 valid", out), out
    monkeypatch.setattr(chunks, "uses_kernel", lambda n, kernel=None: True)  # as a large sweep does
    monkeypatch.setattr(chunks, "loaded", lambda kernel: False)  # in a fresh process
    monkeypatch.setattr(chunks, "cold", lambda kernel: True)  # on a cold cache
    code, out, err = memsim("sweep", spec, "-o", tmp_path / "cold", "--quiet")
    assert code == 0 and "s in all, with reading the spec and compiling the kernel)" in out
    assert err.count("memsim: compiling the kernel (first run only") == 1


def test_disk_full_mid_run_leaves_no_part_file(tmp_path, monkeypatch, memsim):
    spec = spec_file(tmp_path, 'model = ["llama-3.2-1b"]\nmicro_batch = [1, 2, 3, 4]\nseq_len = [512, 1024]')
    real = pq.ParquetWriter.write_table

    def full(self, table, *a, **k):  # the disk fills up on the part file (the size estimate writes to memory)
        if isinstance(getattr(self, "where", None), io.BytesIO):
            return real(self, table, *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "out", "--quiet")
    monkeypatch.setattr(pq.ParquetWriter, "write_table", real)
    assert code == 2 and "No space left" in err and err.count("\n") == 1
    assert not list((tmp_path / "out").glob("part-*")) and not list((tmp_path / "out").glob("_shards/*.json"))


def test_interrupted_sweep_removes_its_half_written_file(tmp_path, monkeypatch):
    spec = spec_file(tmp_path, 'model = ["llama-3.2-1b", "llama-3.1-8b"]\nmicro_batch = [1, 2, 3, 4]\nseq_len = [512, 1024, 2048]')
    from engine.dataset.chunks import SweepKernel

    calls = {"n": 0}
    real = SweepKernel.evaluate

    def interrupt(self, start, count):
        calls["n"] += 1
        if calls["n"] > 2:  # the sample chunk and one real chunk, then Ctrl-C
            raise KeyboardInterrupt
        return real(self, start, count)

    monkeypatch.setattr(SweepKernel, "evaluate", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "out", chunk_rows=4, progress=False, say=lambda *_: None)
    leftovers = list((tmp_path / "out").glob("part-*")) + list((tmp_path / "out").glob("_shards/*.json"))
    assert leftovers == []


def test_refuses_a_sweep_larger_than_the_free_disk(tmp_path, monkeypatch, memsim):
    spec = spec_file(tmp_path, 'model = ["llama-3.2-1b"]\nseq_len = [512, 1024]')
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 10))
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "out")
    assert code == 2 and "--force" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "axes, needle",
    [
        ('microbatch = [1, 2]', "unknown column 'microbatch'"),
        ('precision = ["bf32"]', "unknown precision 'bf32' (accepted: fp32"),
        ('seq_len = []', "axis 'seq_len' is empty"),
        ('gpu = ["h100-sxm"]', "did you mean"),
        ('d_model = [1024]', "is a model dimension"),
    ],
)
def test_bad_spec_is_one_line_and_exit_2(tmp_path, memsim, axes, needle):
    code, _, err = memsim("sweep", spec_file(tmp_path, axes), "-o", tmp_path / "out")
    assert code == 2 and needle in err and err.count("\n") == 1


def test_a_spec_with_no_valid_configuration_says_why(tmp_path, memsim):
    spec = spec_file(tmp_path, 'model = ["llama-3.1-8b"]\nn_gpus = [3]\ntp = [2]')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "out", "--quiet")
    assert code == 2 and "no valid configuration" in err and "n_gpus is not dp * tp * pp * cp" in err


COMPACT_AXES = """\
model = ["llama-3.2-1b", "llama-3.1-8b"]
gpu = ["a100-sxm-80gb", "l4"]
n_gpus = [1, 2, 8]
zero_stage = [0, 3]
lora_rank = [0, 16, 16]
base_quant = ["none", "none", "nf4"]
sp = [false, true]
headroom = [0.1, 0]"""


@pytest.mark.parametrize("keep", [[], ["--feasible-only"]])
def test_compact_rows_answer_as_full_rows_with_the_axes_derived_from_the_index(tmp_path, memsim, keep):
    """A compact part stores the index and the feasibility columns; its view derives every axis (a linked pair,
    booleans, floats) from the index, row for row what the full rows of the same spec store."""
    link = '[link]\nmethod = ["lora_rank", "base_quant"]\n'
    full = spec_file(tmp_path, COMPACT_AXES, link)
    assert memsim("sweep", full, "-o", tmp_path / "f", "--quiet", *keep)[0] == 0
    (tmp_path / "compact.toml").write_text(full.read_text() + "[output]\ncompact = true\n")
    assert memsim("sweep", tmp_path / "compact.toml", "-o", tmp_path / "c", "--quiet", *keep)[0] == 0
    stored = set(pl.read_parquet(tmp_path / "c" / "part-*.parquet").columns)
    assert {"index", "device_peak_bytes", "capacity_bytes", "fits", "valid", "bottleneck"} <= stored
    assert not stored & {"model", "gpu", "lora_rank", "base_quant", "sp", "headroom", "weight_bytes"}
    compact, full_rows = connect(tmp_path / "c"), connect(tmp_path / "f")
    columns = [name for name, *_ in compact.execute("DESCRIBE sweep").fetchall()]
    assert {"model", "gpu", "n_gpus", "lora_rank", "base_quant", "sp", "headroom"} <= set(columns)
    select = f"SELECT {', '.join(columns)} FROM sweep ORDER BY index"
    assert compact.execute(f"DESCRIBE {select}").fetchall() == full_rows.execute(f"DESCRIBE {select}").fetchall()
    rows = compact.execute(select).fetchall()
    assert rows == full_rows.execute(select).fetchall() and len(rows) > 0
    code, out, _ = memsim("query", "min_gpus", "--sweep", tmp_path / "c", "--format", "csv")
    assert code == 0 and "llama-3.1-8b" in out


@pytest.mark.slow
def test_the_report_of_a_compact_sweep_says_what_it_cannot_chart(tmp_path, memsim):
    spec = spec_file(tmp_path, 'model = ["llama-3.2-1b"]\ngpu = ["a100-sxm-80gb"]\nn_gpus = [1, 2]', "[output]\ncompact = true\n")
    assert memsim("sweep", spec, "-o", tmp_path / "c", "--quiet")[0] == 0
    code, _, _ = memsim("report", "--sweep", tmp_path / "c", "-o", tmp_path / "r.html")
    assert code == 0 and "compact rows" in (tmp_path / "r.html").read_text()


LINKED = """\
[axes]
model = ["llama-3.2-1b"]
lora_rank = [0, 16, 16]
micro_batch = [1, 2]
base_quant = ["none", "none", "nf4"]

[link]
method = ["lora_rank", "base_quant"]
"""


def test_linked_axes_sweep_their_zip_not_their_product():
    from engine.configure.grid import build_grid, decode
    from engine.configure.spec import parse_spec
    from engine.dataset.chunks import SweepKernel

    grid = build_grid(parse_spec(tomllib.loads(LINKED), LINKED))
    assert grid.total == 3 * 2  # full, LoRA, QLoRA x two micro-batches: no nf4-without-adapters rows
    linked = next(a for a in grid.axes if a.linked)
    assert linked.columns == [("lora_rank", [0, 16, 16]), ("base_quant", ["none", "none", "nf4"])]
    configs = [decode(grid, i) for i in range(grid.total)]
    got = {(int(c.lora_rank), int(c.base_quant), int(c.micro_batch)) for c in configs}
    assert got == {(r, q, mb) for r, q in ((0, 0), (16, 0), (16, 2)) for mb in (1, 2)}  # Quant.NF4 = 2
    chunk = SweepKernel(grid).evaluate(0, grid.total)
    cases = [{"model": "llama-3.2-1b", "lora_rank": int(c.lora_rank), "base_quant": ["none", "int8", "nf4"][c.base_quant],
              "micro_batch": int(c.micro_batch)} for c in configs]
    want = pl.from_arrow(estimate_table(cases))
    assert chunk.values("device_peak_bytes").tolist() == want["device_peak_bytes"].to_list()
    assert all(chunk.values("valid") == 1)


@pytest.mark.parametrize("link, needle", [
    ('method = ["lora_rank"]', "two or more different axes"),
    ('method = ["lora_rank", "tp"]', "'tp', which is not an axis"),
    ('a = ["lora_rank", "base_quant"]\nb = ["base_quant", "micro_batch"]', "in two [link] groups"),
    ('method = ["lora_rank", "micro_batch"]', "as many values each, got lora_rank 3, micro_batch 2"),
    ('method = "lora_rank"', "two or more different axes"),
])
def test_a_bad_link_is_one_line(link, needle):
    from engine.configure.spec import parse_spec

    text = LINKED.split("[link]")[0] + "[link]\n" + link + "\n"
    with pytest.raises(UserError, match=re.escape(needle)):
        parse_spec(tomllib.loads(text), text)


def test_a_link_that_repeats_a_combination_is_refused():
    from engine.configure.grid import build_grid
    from engine.configure.spec import parse_spec

    text = LINKED.replace('base_quant = ["none", "none", "nf4"]', 'base_quant = ["none", "nf4", "nf4"]')
    with pytest.raises(UserError, match="repeats a combination"):
        build_grid(parse_spec(tomllib.loads(text), text))


def test_a_linked_sweep_writes_each_linked_input_as_a_column(tmp_path):
    spec = spec_file(tmp_path, LINKED.removeprefix("[axes]\n"))
    run_sweep(spec, tmp_path / "out", progress=False, say=lambda *_: None)
    rows = pl.read_parquet(tmp_path / "out" / "part-*.parquet").with_columns(pl.col(pl.Categorical).cast(pl.String))
    assert sorted(rows.select("lora_rank", "base_quant", "micro_batch").rows()) == sorted(
        (r, q, mb) for r, q in ((0, "none"), (16, "none"), (16, "nf4")) for mb in (1, 2))


def test_the_docs_linked_example_sweeps_the_combinations_it_lists():
    from engine import REPO_ROOT
    from engine.configure.grid import build_grid
    from engine.configure.spec import parse_spec

    blocks = re.findall(r"```toml\n(.*?)```", (REPO_ROOT / "docs" / "config.md").read_text(), flags=re.DOTALL)
    linked = next(b for b in blocks if "[link]" in b)
    assert build_grid(parse_spec(tomllib.loads(linked), linked)).total == 3 * 3  # micro-batches x methods
