"""Issue #13, inputs: what a careless or hostile user types ends in a result or in one line on stderr and exit 2,
never in a traceback, and never in a meaningless answer (a NaN capacity factor, GPT-2 past its learned
positions, a quoted "false" taken as true, an empty shard that looks complete, a spec table ignored).

The property tests at the end throw random values at every input through each way in: `memsim explain` flags,
case-list cells, sweep-spec TOML and config.json fields. A few examples run in the fast tier; the many-example
runs are marked slow.
"""

import json
import math
import os
import shutil
import signal
import stat
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.configure.resolve import MODEL_FIELD_NAMES
from engine.inputs.vocabulary import INPUT_FIELDS
from tests.dataset_helpers import one_line_error, swept, sweep_rows, write_spec

GPT2_CONFIG = os.path.join(os.path.dirname(__file__), "fixtures", "hf_configs", "gpt2.json")
TWO_ROWS = '[axes]\nmodel = ["gpt2"]\nseq_len = [512, 1024]\n'


# --- 2. accepted but meaningless ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", *[pytest.param(v, marks=pytest.mark.slow) for v in ("inf", "-inf", "0", "-1",
                                                                                             "1e400")]])
def test_capacity_factor_must_be_a_positive_finite_number_everywhere(memsim, tmp_path, value):
    assert one_line_error(*memsim("explain", f"--capacity-factor={value}")[::2])
    cases = tmp_path / "cases.csv"
    cases.write_text(f"model,capacity_factor\nmixtral-8x7b,{value}\n")
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.parquet")
    assert one_line_error(code, err) and "capacity_factor" in err and not (tmp_path / "e.parquet").exists()
    toml_value = {"nan": "nan", "inf": "inf", "-inf": "-inf", "1e400": "1e400"}.get(value, value)
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["mixtral-8x7b"]\ncapacity_factor = [{toml_value}]\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and "capacity_factor" in err and not (tmp_path / "ds").exists()


def test_a_sequence_past_the_learned_positions_is_an_invalid_row(memsim, tmp_path):
    code, _, err = memsim("explain", "--model", "gpt2", "--seq-len", "8192")
    assert one_line_error(code, err) and "learned positions" in err
    assert memsim("explain", "--model", "gpt2", "--seq-len", "1024")[0] == 0
    rows = estimate_rows(memsim, tmp_path, "model,seq_len\ngpt2,1024\ngpt2,1025\nllama-3.1-8b,131072\n")
    assert rows["valid"].to_list() == [True, False, True]
    assert rows["fits"][1] is False and "n_positions" in rows["invalid_reason"][1]


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_an_invalid_row(memsim, tmp_path):
    # torchao's float8 and Transformer Engine refuse an A100 (data/architectures.toml): never a fit or a step time.
    code, _, err = memsim("explain", "--precision", "fp8", "--gpu", "a100-sxm-80gb")
    assert one_line_error(code, err) and "FP8 tensor cores" in err
    assert memsim("explain", "--precision", "fp8", "--gpu", "h100-sxm-80gb")[0] == 0
    rows = estimate_rows(memsim, tmp_path, "precision,gpu\nfp8,a100-sxm-80gb\nfp8,h100-sxm-80gb\nfp8,rtx-4090\n"
                                           "amp_bf16,a100-sxm-80gb\n").to_dicts()
    assert [row["valid"] for row in rows] == [False, True, True, True]  # the RTX 4090 (Ada) has them
    refused, runs = rows[0], rows[1]
    assert "FP8 tensor cores" in refused["invalid_reason"] and refused["fits"] is False
    assert refused["device_peak_bytes"] is refused["step_time_s"] is refused["tokens_per_gpu_s"] is None
    assert refused["activation_bytes"] == runs["activation_bytes"]  # the step holds what it holds where it runs
    ds = swept(tmp_path, '[axes]\nprecision = ["amp_bf16", "fp8"]\ngpu = ["a100-sxm-80gb", "h100-sxm-80gb"]\n')
    frame = sweep_rows(ds)
    assert frame.filter(~pl.col("valid"))[["precision", "gpu"]].rows() == [("fp8", "a100-sxm-80gb")]


@pytest.mark.parametrize("axis, says", [("headroom = [nan]", "headroom"), ("zero_stage = [4]", "zero_stage"),
                                        ("headroom = [1.0]", "headroom"), ("seq_len = [inf]", "seq_len"),
                                        ("tp = [1.5]", "tp"), ("seq_len = [[1, 2]]", "seq_len"),
                                        ("micro_batch = [{ a = 1 }]", "micro_batch")])
def test_a_spec_axis_explain_would_refuse_is_refused(memsim, tmp_path, axis, says):
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["gpt2"]\n{axis}\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err and not (tmp_path / "ds").exists()


def every_input_of(preset: str) -> str:
    """Spec axes that sweep each input a recipe preset sets, at the preset's own value."""
    from engine.catalogs.recipes import preset_inputs
    from engine.inputs.vocabulary import spell

    return "".join(f"{k} = [{toml_value(spell(k, v))}]\n" for k, v in preset_inputs(preset).items())


@pytest.mark.parametrize("axes", ['recipe = ["none"]\n', "recipe = [\"none\", \"torchtune-qlora\"]\n{qlora}"])
def test_a_recipe_axis_that_sets_no_input_is_a_result(memsim, tmp_path, axes):
    spec = write_spec(tmp_path, '[axes]\nmodel = ["llama-3.2-1b"]\n' + axes.format(qlora=every_input_of("torchtune-qlora")))
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert code == 0, err


@pytest.mark.parametrize("option, says", [
    ('feasible_only = "false"', "feasible_only must be true or false"),
    ('valid_only = 1', "valid_only must be true or false"),
    ('compact = "yes"', "compact must be true or false"),
    ("rows_per_chunk = -5", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = 0", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = 1.5", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = inf", "rows_per_chunk must be an integer from 1"),
    ('rows_per_chunk = "8"', "rows_per_chunk must be an integer from 1"),
    ('compression = "zzz"', "compression must be one of"),
    ("compression = 3", "compression must be one of"),
])
def test_output_options_are_checked_by_type(memsim, tmp_path, option, says):
    spec = write_spec(tmp_path, f"{TWO_ROWS}[output]\n{option}\n")
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err
    assert not (tmp_path / "ds").exists()  # nothing is written, least of all an empty shard that looks complete


def test_output_options_of_the_right_type_are_taken(memsim, tmp_path):
    spec = write_spec(tmp_path, f'{TWO_ROWS}[output]\nfeasible_only = false\nrows_per_chunk = 1\ncompression = "ZSTD"\n')
    assert memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")[0] == 0
    assert pl.read_parquet(tmp_path / "ds" / "part-00000-of-00001.parquet").height == 2


@pytest.mark.parametrize("body, says", [("[filters]\nfits = true\n", "[filters] is not supported"),
                                        ("[axis]\nseq_len = [1]\n", "unknown table"),
                                        ('output = "x"\n', "[output] must be a table"),
                                        ("title = 3\n", "title must be text")])
def test_an_unknown_or_malformed_spec_table_is_refused(memsim, tmp_path, body, says):
    spec = write_spec(tmp_path, body + TWO_ROWS if not body.startswith("[") else TWO_ROWS + body)
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err


# --- 3. one line and exit 2, never a traceback ----------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--micro-batch", "nan"], ["--seq-len", "1e400"], ["--headroom=inf"],
                                  ["--n-layers", "1e30", "--d-model", "64", "--n-heads", "4", "--vocab", "100"],
                                  ["--tp", "99999999999999999999999999"], ["--capacity-bytes", "-0"]])
def test_non_finite_or_huge_flags_are_one_line(memsim, argv):
    code, _, err = memsim("explain", *argv)
    assert code == 0 or one_line_error(code, err), err


@pytest.mark.parametrize("argv", [["--d-model=339536779"], ["--bf16-tflops=0"]])
def test_explain_found_by_the_property_tests_is_a_result_or_one_line(argv):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would be a second line on stderr
        code, out, err = run_cli("explain", *argv)
    assert (code == 0 and out) or one_line_error(code, err), err


@pytest.mark.parametrize("cell", ["nan", "inf", "-inf", "1e400", "9" * 30, "1e30", "0x10"])
def test_non_finite_or_huge_cells_are_one_line(memsim, tmp_path, cell):
    cases = tmp_path / "cases.csv"
    cases.write_text(f"model,micro_batch,seq_len\nllama-3.2-1b,{cell},1024\n")
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.parquet")
    assert one_line_error(code, err) and "micro_batch" in err and not (tmp_path / "e.parquet").exists()


@pytest.mark.parametrize("key, value", [("n_embd", "NaN"), ("n_embd", "Infinity"), ("n_layer", "1e400"),
                                        ("n_embd", str(10**30)), ("n_head", "-12"), ("n_positions", '"1024"'),
                                        ("vocab_size", "true"), ("n_layer", "[12]"), ("n_embd", "768.0")])
def test_bad_numbers_in_a_config_json_are_one_line(memsim, tmp_path, key, value):
    config = json.loads(Path(GPT2_CONFIG).read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config).replace(f'"{key}": {json.dumps(config[key])}', f'"{key}": {value}'))
    assert value in path.read_text()
    code, _, err = memsim("explain", "--model", path, "--seq-len", "512")
    assert one_line_error(code, err), err
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["{path}"]\nseq_len = [512]\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and not (tmp_path / "ds").exists()


def test_a_config_json_nested_too_deeply_is_one_line(memsim, tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert one_line_error(*memsim("explain", "--model", path)[::2])


def test_a_binary_spec_file_is_one_line(memsim, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(bytes(range(256)) * 4)
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds")
    assert one_line_error(code, err) and "UTF-8" in err and not (tmp_path / "ds").exists()


@pytest.fixture
def tiny_dataset(tmp_path_factory):
    return swept(tmp_path_factory.mktemp("tiny"), TWO_ROWS)


def output_commands(tmp_path, dataset, output):
    cases = tmp_path / "cases.csv"
    cases.write_text("model,seq_len\ngpt2,512\n")
    return [["estimate", cases, "-o", output], ["sql", "SELECT 1 AS one", "-o", output],
            ["query", "summary", "--sweep", dataset, "-o", output],
            ["report", "--sweep", dataset, "-o", output]]


def test_an_empty_output_path_is_one_line(memsim, tmp_path, tiny_dataset):
    for argv in output_commands(tmp_path, tiny_dataset, "") + [["sweep", tmp_path / "s.toml", "-o", ""]]:
        code, _, err = memsim(*argv)
        assert one_line_error(code, err), (argv, err)


def test_an_output_whose_folder_cannot_be_made_is_one_line(memsim, tmp_path, tiny_dataset):
    (tmp_path / "a-file").write_text("x")
    for argv in output_commands(tmp_path, tiny_dataset, tmp_path / "a-file" / "sub" / "out.csv"):
        code, _, err = memsim(*argv)
        assert one_line_error(code, err), (argv, err)
    assert (tmp_path / "a-file").read_text() == "x"


def test_a_sweep_onto_a_file_is_one_line(memsim, tmp_path):
    spec = write_spec(tmp_path, TWO_ROWS)
    (tmp_path / "a-file").write_text("x")
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "a-file", "--quiet")
    assert one_line_error(code, err) and "not a directory" in err and (tmp_path / "a-file").read_text() == "x"


def test_a_disk_that_fills_up_under_the_parquet_footer_leaves_nothing(memsim, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    spec, close = write_spec(tmp_path, TWO_ROWS), pq.ParquetWriter.close

    def full(self):
        close(self)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "close", full)
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    monkeypatch.undo()
    assert one_line_error(code, err) and "No space left" in err
    assert not list((tmp_path / "ds").glob("part-*")) and not list((tmp_path / "ds").glob("_shards/*.json"))


@pytest.mark.parametrize("fmt", ["parquet", pytest.param("csv", marks=pytest.mark.slow)])
def test_a_disk_that_fills_up_under_a_query_output_leaves_nothing(memsim, tmp_path, monkeypatch, fmt):
    if fmt == "parquet":  # polars reports a failed write as a ComputeError
        def full(self, *a, **k):
            raise pl.exceptions.ComputeError("parquet: underlying IO error: No space left on device (os error 28)")
        monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    else:
        def full(self, *a, **k):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(Path, "write_text", full)
    out = tmp_path / f"rows.{fmt}"
    code, _, err = memsim("sql", "SELECT 1 AS one", "-o", out)
    assert one_line_error(code, err) and "No space left" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["sql", "SELECT * FROM range(2000000)", "-o", "{tmp}/rows.parquet"],
                                  ["sql", "SELECT * FROM range(2000000)", "-o", "{tmp}/rows.csv"],
                                  ["sweep", "data/sweeps/default.toml", "-o", "{tmp}/ds", "--quiet", "--force"]])
def test_a_full_disk_is_one_line_for_real(tmp_path, argv):
    # RLIMIT_FSIZE makes every write past 64 KiB fail with EFBIG, as a full disk fails with ENOSPC
    import resource
    import subprocess
    import sys

    def small_disk():
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    argv = [a.format(tmp=tmp_path) for a in argv]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))",
                           *argv], check=False, cwd=root, capture_output=True, text=True, preexec_fn=small_disk, timeout=600)
    assert one_line_error(proc.returncode, proc.stderr), proc.stderr
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and (".tmp" in p.name or p.suffix in (".parquet", ".csv"))]
    assert leftovers == []


# --- 7. -o writes regular files only ---------------------------------------------------------------------------

def cases_file(tmp_path):
    cases = tmp_path / "cases.csv"
    cases.write_text("model,seq_len\ngpt2,512\n")
    return cases


def test_an_output_onto_a_fifo_is_refused(memsim, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv in (["estimate", cases_file(tmp_path), "-o", fifo], ["sql", "SELECT 1", "-o", fifo, "--format", "csv"]):
        code, _, err = memsim(*argv)
        assert one_line_error(code, err) and "FIFO" in err
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_an_output_onto_a_device_is_refused(memsim, tmp_path):
    device = tmp_path / "full"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # a private /dev/full
    code, _, err = memsim("estimate", cases_file(tmp_path), "-o", device)
    assert one_line_error(code, err) and "device" in err and stat.S_ISCHR(os.stat(device).st_mode)


def test_an_output_onto_a_symlink_writes_its_target(memsim, tmp_path):
    target, link = tmp_path / "real.parquet", tmp_path / "link.parquet"
    link.symlink_to(target)
    assert memsim("estimate", cases_file(tmp_path), "-o", link)[0] == 0
    assert link.is_symlink() and target.is_file() and pl.read_parquet(link).height == 1


def test_an_output_onto_a_directory_is_one_line(memsim, tmp_path):
    (tmp_path / "dir").mkdir()
    code, _, err = memsim("estimate", cases_file(tmp_path), "-o", tmp_path / "dir")
    assert one_line_error(code, err) and "directory" in err


# --- property tests: every input ends in a result or one line and exit 2 -------------------------------------

def run_cli(*argv) -> tuple[int, str, str]:
    """The CLI in-process (hypothesis runs many examples per test: no function-scoped capsys)."""
    import contextlib
    import io

    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as stop:  # argparse
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def result_or_one_line(code: int, out: str, err: str) -> None:
    event(f"exit {code}")
    assert code in (0, 2), (code, err)
    if code == 2:
        assert one_line_error(code, err), err
    else:
        assert out and "Traceback" not in err


SPECIAL_TEXT = ["nan", "NaN", "inf", "-inf", "+inf", "1e400", "-1e400", "1e30", "9" * 40, "-0", "0", "-1", "1_000",
                "0x10", "1.5", " 7 ", "", " ", "true", "false", "none", "all", "١٢", "\u00a0", "5e-324"]
# integers of any size: past int64 and float (10^400), up to the 4,300 digits TOML and JSON readers convert
huge_ints = st.integers(19, 4299).map(lambda digits: 10**digits - 1) | st.integers(19, 4299).map(lambda d: -(10**d))
texts = st.one_of(st.sampled_from(SPECIAL_TEXT), st.integers(-2**80, 2**80).map(str),
                  st.integers(1, 6000).map(lambda digits: "9" * digits),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=12))
toml_scalars = st.one_of(st.integers(-2**70, 2**70), huge_ints, st.floats(allow_nan=True, allow_infinity=True),
                         st.booleans(), st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=10))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), huge_ints,
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def plausible(name: str) -> list:
    """Values a user might well give an input: its choices, small and extreme numbers, catalog keys."""
    from engine.inputs.vocabulary import INPUTS, is_choice, names

    field = INPUTS[name]
    if name == "model":
        return ["gpt2", "llama-3.2-1b", "mixtral-8x7b", "deepseek-v2-lite", "llama", GPT2_CONFIG]
    if name == "gpu":
        return ["h100", "a100-sxm-80gb", "rtx-4090", "mi300x"]
    if name == "recipe":
        from engine.catalogs.recipes import presets

        return ["none", *presets()]
    if is_choice(field):
        return names(field.kind)
    if field.kind == "bool":
        return [True, False]
    if field.kind == "float":
        return [0.0, 0.1, 0.5, 1.0, 2.0, field.low, field.high]
    return [0, 1, 2, 4, 8, 1024, field.low, field.high]


def values_of(name: str, wild: bool = True):
    likely = st.sampled_from([v for v in plausible(name) if v is not None])
    return st.one_of(likely, likely, likely, likely, toml_scalars) if wild else likely


NAMES = [f.name for f in INPUT_FIELDS]
CONFIGS = sorted(os.listdir(os.path.dirname(GPT2_CONFIG)))
FEW = settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")  # a TOML basic string


def explain_flag(name, value):
    result_or_one_line(*run_cli("explain", f"--{name.replace('_', '-')}={value}"))


def estimate_cell(tmp, name, value):
    import csv

    cases, out = tmp / "cases.csv", tmp / "e.parquet"
    with open(cases, "w", newline="") as f:
        csv.writer(f).writerows([["model", "seq_len", name] if name not in ("model", "seq_len") else [name],
                                 ["llama-3.2-1b", "512", value] if name not in ("model", "seq_len") else [value]])
    out.unlink(missing_ok=True)
    code, text, err = run_cli("estimate", cases, "-o", out)
    result_or_one_line(code, text, err)
    assert out.exists() == (code == 0)


def sweep_spec(tmp, axes, output):
    body = "[axes]\n" + "".join(f"{k} = [{', '.join(toml_value(v) for v in vs)}]\n" for k, vs in axes.items())
    body += "[output]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in output.items())
    spec, out = tmp / "spec.toml", tmp / "ds"
    spec.write_text(body)
    shutil.rmtree(out, ignore_errors=True)
    code, text, err = run_cli("sweep", spec, "-o", out, "--quiet")
    result_or_one_line(code, text, err)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    if code == 2 and out.exists():  # refused after the dataset was made (no valid row): still whole
        from engine.dataset.verify import verify_dataset

        assert verify_dataset(out).ok


def config_field(tmp, name, key, value):
    config = json.loads((Path(GPT2_CONFIG).parent / name).read_text())
    if key is None:
        key = "text_config" if "text_config" in config else "model_type"
    config[key] = value
    path = tmp / "config.json"
    path.write_text(json.dumps(config))
    result_or_one_line(*run_cli("explain", "--model", path, "--seq-len", "256"))


def config_keys(name):
    return sorted(json.loads((Path(GPT2_CONFIG).parent / name).read_text()))


AXIS_NAMES = [n for n in NAMES if n not in MODEL_FIELD_NAMES] + ["model", "gpu"] * 8 + ["n_layers"]


axes_strategy = st.tuples(st.booleans(), st.lists(st.sampled_from(AXIS_NAMES), min_size=1, max_size=4, unique=True)).flatmap(
    lambda wild_names: st.fixed_dictionaries({n: st.lists(values_of(n, wild_names[0]), min_size=1, max_size=3, unique=True)
                                              for n in wild_names[1]}))
OPTION_VALUES = {"feasible_only": [True, False], "valid_only": [True, False], "compact": [True, False],
                 "rows_per_chunk": [1, 7, 1 << 20], "compression": ["lz4", "zstd", "none", "gzip"]}


def option_values(name: str):
    likely = st.sampled_from(OPTION_VALUES[name])
    return st.one_of(likely, likely, likely, likely, toml_scalars)


output_strategy = st.lists(st.sampled_from(sorted(OPTION_VALUES)), max_size=2, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: option_values(n) for n in names}))
cell_strategy = st.sampled_from(NAMES).flatmap(
    lambda n: st.tuples(st.just(n), st.one_of(values_of(n).map(lambda v: toml_value(v).strip('"')), texts)))
flag_strategy = cell_strategy
config_case = st.sampled_from(CONFIGS).flatmap(
    lambda name: st.tuples(st.just(name), st.one_of(st.sampled_from(config_keys(name)), st.none()), json_values))


# each property a few examples in the fast tier, many in the slow one
TIERS = [pytest.param(FEW, id="few"), pytest.param(MANY, id="many", marks=pytest.mark.slow)]


def holds(tier, check, *strategies) -> None:
    """`check` passes on every example hypothesis draws from the strategies, as many as the tier's settings say."""
    tier(given(*strategies)(check))()


@pytest.mark.parametrize("tier", TIERS)
def test_any_flag_value_is_a_result_or_one_line(tier):
    holds(tier, lambda case: explain_flag(*case), flag_strategy)


@pytest.mark.parametrize("tier", TIERS)
def test_any_case_list_cell_is_a_result_or_one_line(tmp_path_factory, tier):
    holds(tier, lambda case: estimate_cell(tmp_path_factory.mktemp("cell"), *case), cell_strategy)


@pytest.mark.parametrize("tier", TIERS)
def test_any_spec_is_a_result_or_one_line(tmp_path_factory, tier):
    holds(tier, lambda axes, output: sweep_spec(tmp_path_factory.mktemp("spec"), axes, output),
          axes_strategy, output_strategy)


@pytest.mark.parametrize("tier", TIERS)
def test_any_config_json_field_is_a_result_or_one_line(tmp_path_factory, tier):
    holds(tier, lambda case: config_field(tmp_path_factory.mktemp("config"), *case), config_case)


# --- issue #23: no wrong answer on odd input --------------------------------------------------------------------

INT_OUTPUTS_NEVER_NEGATIVE = ["weight_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes", "temp_bytes",
                              "allocated_peak_bytes", "reserved_peak_bytes", "overhead_bytes", "device_peak_bytes",
                              "host_bytes", "capacity_bytes", "usable_bytes"]


def estimate_rows(memsim, tmp_path, csv_text: str) -> pl.DataFrame:
    cases, out = tmp_path / "cases.csv", tmp_path / "e.parquet"
    cases.write_text(csv_text)
    code, _, err = memsim("estimate", cases, "-o", out)
    assert code == 0, err
    return pl.read_parquet(out)


def honest(rows: pl.DataFrame) -> None:
    """A valid row answers every output with a non-negative number; an invalid one says why and never fits."""
    for row in rows.iter_rows(named=True):
        if row["valid"]:
            assert row["invalid_reason"] is None and row["fits"] is not None, row
            assert all(row[n] is not None and row[n] >= 0 for n in INT_OUTPUTS_NEVER_NEGATIVE), row
            assert row["step_time_s"] > 0 and row["tokens_per_gpu_s"] > 0, row
        else:
            assert row["invalid_reason"] and row["fits"] is False, row


def test_first_dense_layers_beyond_n_layers_is_never_an_answer(memsim, tmp_path):
    code, _, err = memsim("explain", "--model", "mixtral-8x7b", "--first-dense-layers", "100")
    assert one_line_error(code, err) and "first_dense_layers exceeds n_layers" in err and "(-" not in err  # no -94B
    rows = estimate_rows(memsim, tmp_path, "model,first_dense_layers\nmixtral-8x7b,100\nmixtral-8x7b,32\n"
                                           "deepseek-v3,61\ndeepseek-v3,62\n")
    assert rows["valid"].to_list() == [False, True, True, False]
    assert rows["invalid_reason"][0] == "first_dense_layers exceeds n_layers" and rows["device_peak_bytes"][0] is None
    honest(rows)


def test_a_config_json_with_more_dense_layers_than_layers_is_one_line(memsim, tmp_path):
    config = json.loads((Path(GPT2_CONFIG).parent / "deepseek-v2-lite.json").read_text())
    config["first_k_dense_replace"] = config["num_hidden_layers"] + 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _, err = memsim("explain", "--model", path)
    assert one_line_error(code, err) and "first_k_dense_replace" in err


def test_dims_over_a_catalog_model_are_counted_from_those_dims(memsim):
    from engine.configure.resolve import resolve_case
    from engine.model.params import dims_param_count, param_count

    deeper, _, _ = resolve_case({"model": "llama-3.1-8b", "n_layers": 64})
    assert param_count(deeper) == dims_param_count(deeper) > 14e9  # not the published 8,030,261,248
    given, _, _ = resolve_case({"model": "llama-3.1-8b", "n_layers": 64, "n_params": 9_000_000_000})
    assert param_count(given) == 9_000_000_000  # a count given beside the dims is the user's: it rules
    same, _, _ = resolve_case({"model": "llama-3.1-8b", "n_layers": 32})
    assert param_count(same) == 8_030_261_248  # the published count, unchanged when the dims are
    code, out, _ = memsim("explain", "--model", "llama-3.1-8b", "--n-layers", "64", "--json")
    assert code == 0 and "(15.01B params)" in json.loads(out)["summary"]
    base = json.loads(memsim("explain", "--model", "llama-3.1-8b", "--json")[1])["outputs"]["weight_bytes"]
    assert json.loads(out)["outputs"]["weight_bytes"] > 1.8 * base


@pytest.mark.parametrize("kv", ["5", "64", "33"])
def test_n_kv_heads_must_divide_n_heads_on_every_path(memsim, tmp_path, kv):
    code, _, err = memsim("explain", "--model", "llama-3.1-8b", "--n-kv-heads", kv)
    assert one_line_error(code, err) and f"n_kv_heads {kv} must divide n_heads 32" in err
    cases = tmp_path / "cases.csv"
    cases.write_text(f"model,n_kv_heads\nllama-3.1-8b,8\nllama-3.1-8b,{kv}\n")
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.parquet")
    assert one_line_error(code, err) and "row 2" in err and not (tmp_path / "e.parquet").exists()
    config = json.loads((Path(GPT2_CONFIG).parent / "llama-3.1-8b.json").read_text()) | {"num_key_value_heads": int(kv)}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert one_line_error(*memsim("explain", "--model", tmp_path / "config.json")[::2])


def test_a_model_known_by_n_params_alone_is_an_invalid_row(memsim, tmp_path):
    for extra in ([], ["--json"]):
        code, _, err = memsim("explain", "--model", "custom", "--n-params", "1000000000", *extra)
        assert one_line_error(code, err) and "n_params only" in err, err
    code, _, err = memsim("explain", "--model", "llama-3.1-8b", "--n-layers", "0")
    assert one_line_error(code, err) and "neither dims" in err
    rows = estimate_rows(memsim, tmp_path, "model,n_params,n_gpus,zero_stage\ncustom,1000000000,1,0\n"
                                           "custom,1000000000,8,3\nllama-3.2-1b,,1,0\n")
    assert rows["valid"].to_list() == [False, False, True] and rows["invalid_reason"][0].startswith("model has n_params")
    assert rows["weight_bytes"][0] == 4_000_000_000  # the states still follow from n_params (CONFIG.md)
    honest(rows)


LAYER_SPLITS = st.fixed_dictionaries({
    "model": st.sampled_from(["mixtral-8x7b", "deepseek-v2-lite", "qwen3-30b-a3b", "llama-3.2-1b"]),
    "n_layers": st.integers(1, 64), "first_dense_layers": st.integers(0, 80), "pp": st.sampled_from([1, 2, 4, 8]),
    "pp_first_layers": st.integers(0, 80), "pp_last_layers": st.integers(0, 80), "vpp": st.sampled_from([1, 2]),
    "pp_schedule": st.sampled_from(["1f1b", "interleaved", "gpipe"]), "grad_accum": st.integers(1, 16),
    "n_params": st.sampled_from([None, None, None, 10**9])})


def layer_split_rows(cases: list[dict]) -> None:
    from engine.configure.resolve import resolve_cases
    from engine.model.kernel import evaluate

    records, _, _ = resolve_cases([{k: v for k, v in c.items() if v is not None} for c in cases])
    out = evaluate(records)
    for i, case in enumerate(cases):
        if out["valid"][i]:
            assert all(out[n][i] >= 0 for n in INT_OUTPUTS_NEVER_NEGATIVE), case
            assert out["fits"][i] in (0, 1) and out["step_time_s"][i] > 0, case
        else:
            assert out["fits"][i] == 0 and out["invalid_reason"][i] > 0, case
        if case["first_dense_layers"] > case["n_layers"]:
            assert not out["valid"][i], case


@FEW
@given(st.lists(LAYER_SPLITS, min_size=1, max_size=8))
def test_any_layer_split_is_an_honest_row(cases):
    layer_split_rows(cases)


@pytest.mark.slow
@MANY
@given(st.lists(LAYER_SPLITS, min_size=1, max_size=8))
def test_many_layer_splits(cases):
    layer_split_rows(cases)


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "head_dim"])
@pytest.mark.parametrize("digits", [20, 400, 4000, 5000])
def test_an_integer_of_any_size_in_a_config_json_is_one_line(memsim, tmp_path, key, digits):
    path = tmp_path / "config.json"
    text = (Path(GPT2_CONFIG).parent / "llama-3.1-8b.json").read_text()
    config = json.loads(text) | {key: 7}
    path.write_text(json.dumps(config).replace(f'"{key}": 7', f'"{key}": {"9" * digits}'))  # past json.dumps' limit
    code, _, err = memsim("explain", "--model", path)
    assert one_line_error(code, err) and len(err) < 400, err


@pytest.mark.parametrize("axis", ["seq_len", "dropout", "n_gpus", "headroom"])
@pytest.mark.parametrize("digits", [400, 5000])
def test_an_integer_of_any_size_on_a_spec_axis_or_in_a_cell_is_one_line(memsim, tmp_path, axis, digits):
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["gpt2"]\n{axis} = [{"9" * digits}]\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and len(err) < 400 and not (tmp_path / "ds").exists(), err
    cases = tmp_path / "cases.csv"
    cases.write_text(f"model,{axis}\ngpt2,{'9' * digits}\n")
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.parquet")
    assert one_line_error(code, err) and axis in err and len(err) < 400, err


def test_integers_are_read_exactly_beyond_a_float():
    from engine.inputs.vocabulary import parse

    assert parse("host_ram_bytes", str(2**56 - 1)) == 2**56 - 1  # float("72057594037927935") is 2^56


@pytest.mark.parametrize("size", ["80", "80.5", " 24 ", "0"])
def test_gpu_memory_needs_a_unit(memsim, size):
    code, _, err = memsim("explain", "--gpu-memory", size)
    assert one_line_error(code, err) and "needs a unit" in err


@pytest.mark.parametrize("flag", ["--model", "--gpu", "--seq-len", "--precision", "--gpu-memory", "--sp", "--recipe"])
def test_an_empty_flag_value_is_an_error_not_the_default(memsim, flag):
    for argv in ([flag, ""], [f"{flag}=  "]):
        code, _, err = memsim("explain", *argv)
        assert one_line_error(code, err) and "empty value" in err and flag in err


def test_a_hub_ref_cannot_lead_out_of_the_cache(tmp_path, monkeypatch):
    from engine.catalogs.hub import cached_config

    cache = tmp_path / "hub"
    folder = cache / "models--someone--secret"
    (folder / "refs").mkdir(parents=True)
    (folder / "snapshots").mkdir()
    outside = tmp_path / "config.json"  # what "../.." leads to from snapshots/
    outside.write_text((Path(GPT2_CONFIG).parent / "llama-3.1-8b.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for ref in ["../..", "../../..", str(tmp_path), "../../hub/../..", "a/../../.."]:
        (folder / "refs" / "main").write_text(ref)
        assert cached_config("someone/secret") is None, ref
    (folder / "snapshots" / "abc").mkdir()
    (folder / "snapshots" / "abc" / "config.json").symlink_to(outside)  # a link out of the cache is not followed
    assert cached_config("someone/secret") is None
    (folder / "snapshots" / "abc" / "config.json").unlink()
    (folder / "snapshots" / "abc" / "config.json").write_text(outside.read_text())
    assert cached_config("someone/secret") == folder / "snapshots" / "abc" / "config.json"


def test_an_interrupt_while_memsim_imports_is_one_line_and_130():
    import subprocess
    import sys

    # Ctrl-C as numpy starts to load, from the console script's own first line (numpy is the first heavy import)
    script = ("import sys\n"
              "class Interrupt:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'numpy':\n"
              "            raise KeyboardInterrupt\n"
              "sys.meta_path.insert(0, Interrupt())\n"
              "from engine.cli import main\n"
              "sys.exit(main(['explain']))\n")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130 and done.stderr == "memsim: interrupted\n", done.stderr


def test_an_interrupt_inside_a_finalizer_still_stops_the_command(memsim, monkeypatch):
    import time

    import engine.cli.explain

    class Finalized:  # as llvmlite's ObjectRef.__del__ while numba loads the cached kernels
        def __del__(self):
            raise KeyboardInterrupt

    def run(args):
        Finalized()
        for _ in range(1000):  # the re-delivery comes from a helper thread: give it 5 s on a loaded machine
            time.sleep(0.005)
        raise AssertionError("the interrupt was swallowed")

    monkeypatch.setattr(engine.cli.explain, "run", run)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a command starts, whatever ran before
    try:
        code, _, err = memsim("explain")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and "Exception ignored" not in err and err.startswith("memsim: interrupted"), err


@pytest.mark.slow  # two pytest collections in subprocesses (7 s): the whole suite is what compiles
def test_pytest_says_it_compiles_the_kernel_before_it_waits_for_it(tmp_path):
    import subprocess
    import sys

    def collected(**env) -> str:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                               "tests/test_docs.py"], cwd=Path(__file__).parent.parent, env=os.environ | env,
                              check=False, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "memsim: compiling the kernel (first run, ~" in collected(NUMBA_CACHE_DIR=str(tmp_path / "cold"))
    assert "compiling" not in collected(NUMBA_DISABLE_JIT="1")  # nothing compiles: nothing to say
