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
import stat
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.configure.resolve import MODEL_FIELD_NAMES
from engine.inputs.vocabulary import INPUT_FIELDS

GPT2_CONFIG = os.path.join(os.path.dirname(__file__), "fixtures", "hf_configs", "gpt2.json")


def one_line_error(code: int, err: str) -> bool:
    return code == 2 and err.startswith("memsim: error: ") and err.count("\n") == 1 and "Traceback" not in err


def write_spec(tmp_path, body: str, name: str = "spec.toml"):
    path = tmp_path / name
    path.write_text(body)
    return path


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
    cases = tmp_path / "cases.csv"
    cases.write_text("model,seq_len\ngpt2,1024\ngpt2,1025\nllama-3.1-8b,131072\n")
    assert memsim("estimate", cases, "-o", tmp_path / "e.parquet")[0] == 0
    rows = pl.read_parquet(tmp_path / "e.parquet")
    assert rows["valid"].to_list() == [True, False, True]
    assert rows["fits"][1] is False and "n_positions" in rows["invalid_reason"][1]


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
    from engine.dataset.sweep import run_sweep

    root = tmp_path_factory.mktemp("tiny")
    spec = write_spec(root, TWO_ROWS)
    run_sweep(spec, root / "ds", progress=False, say=lambda *_: None)
    return root / "ds"


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
texts = st.one_of(st.sampled_from(SPECIAL_TEXT), st.integers(-2**80, 2**80).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=12))
toml_scalars = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                         st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=10))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=8)),
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
MANY = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


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


@FEW
@given(flag_strategy)
def test_any_flag_value_is_a_result_or_one_line(case):
    explain_flag(*case)


@FEW
@given(cell_strategy)
def test_any_case_list_cell_is_a_result_or_one_line(tmp_path_factory, case):
    estimate_cell(tmp_path_factory.mktemp("cell"), *case)


@FEW
@given(axes_strategy, output_strategy)
def test_any_spec_is_a_result_or_one_line(tmp_path_factory, axes, output):
    sweep_spec(tmp_path_factory.mktemp("spec"), axes, output)


@FEW
@given(config_case)
def test_any_config_json_field_is_a_result_or_one_line(tmp_path_factory, case):
    config_field(tmp_path_factory.mktemp("config"), *case)


@pytest.mark.slow
@MANY
@given(flag_strategy)
def test_many_flag_values(case):
    explain_flag(*case)


@pytest.mark.slow
@MANY
@given(cell_strategy)
def test_many_case_list_cells(tmp_path_factory, case):
    estimate_cell(tmp_path_factory.mktemp("cell"), *case)


@pytest.mark.slow
@MANY
@given(axes_strategy, output_strategy)
def test_many_specs(tmp_path_factory, axes, output):
    sweep_spec(tmp_path_factory.mktemp("spec"), axes, output)


@pytest.mark.slow
@MANY
@given(config_case)
def test_many_config_json_fields(tmp_path_factory, case):
    config_field(tmp_path_factory.mktemp("config"), *case)
