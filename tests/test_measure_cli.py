"""`memsim measure`'s modes as a user meets them (one line and exit 2 for a bad combination, no torch loaded to say
so), and the committed measured sets' writer: it reproduces every committed CSV byte for byte. No torch here."""

import csv
import io
import re
import subprocess
import sys

import pytest

from engine import REPO_ROOT
from engine.checks.measure import reference_sets
from engine.checks.measure.reference_sets import ReferenceSet, chosen_cases, find_case, measure_set
from engine.checks.measure.reference_writer import cell, write_rows
from engine.cli import main
from engine.errors import UserError

# memsim in a fresh interpreter, then whether torch was imported: help and the usage checks come before it loads.
MEMSIM_SAYING_IF_TORCH_LOADED = """
import sys
from engine.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as done:
    code = done.code
print("torch" in sys.modules)
sys.exit(code)
"""


@pytest.mark.parametrize("argv, says", [
    ([], "takes one of CASES, --set, --anatomy or --compiled (got none)"),
    (["cases.csv", "--set", "single", "-o", "x.csv"], "(got CASES and --set)"),
    (["--set", "single", "--anatomy", "gpt2-124m_fp32_adamw_eager_s1024_b4"], "(got --set and --anatomy)"),
    (["--set", "single"], "--set writes a file: name it with -o FILE"),
    (["--set", "single", "-o", "x.csv", "--top", "5"], "--top does not go with --set"),
    (["--set", "single", "-o", "x.csv", "--seq-len", "64"], "--seq-len does not go with --set"),
    (["--anatomy", "gpt2-124m_fp32_adamw_eager_s1024_b4", "--only", "gpt2"], "--only does not go with --anatomy"),
    (["--anatomy", "gpt2-124m_fp32_adamw_eager_s1024_b4", "-o", "x.csv"], "-o does not go with --anatomy"),
    (["--compiled", "gpt2-124m_fp32_adamw_eager_s1024_b4", "--device", "cpu"], "--device does not go with"),
    (["cases.csv", "-o", "x.csv", "--only", "gpt2"], "--only does not go with CASES"),
    (["--anatomy", "gpt2-124m_fp32_adamw_eager_s1024_b4", "--top", "0"], "--top takes a number of at least 1"),
    (["--set", "parallel", "-o", "x.csv", "--device", "cuda"], "the parallel set is measured on fake, not 'cuda'"),
    (["--set", "recipes", "-o", "x.csv", "--only", "no-such-case"], "no case of the recipes set has 'no-such-case'"),
    (["--set", "single", "-o", "x.parquet"], "--set writes a CSV"),
    (["--anatomy", "no-such-case"], "no committed set has a case 'no-such-case'"),
    (["--compiled", "{not json"], "CASE is not valid JSON"),
    (["--compiled", "[1, 2]"], "no committed set has a case"),
    (["--compiled", '{"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128, "checkpointing": "full"}'],
     "--compiled traces checkpointing none or selective_op, not full"),
])
def test_bad_combination_is_one_line_and_exit_2(capsys, argv, says):
    code = main(["measure", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


def test_a_misspelt_harness_column_is_one_line_naming_it(capsys, tmp_path):
    cases = tmp_path / "cases.csv"
    cases.write_text("n_layers,d_model,n_heads,d_ff,vocab,dp,fsdp_wrapp\n2,64,4,128,256,2,fsdp1\n")
    code = main(["measure", str(cases), "-o", str(tmp_path / "out.csv")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "did you mean: fsdp_wrap" in err, err


def test_an_unknown_set_is_argparse_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        main(["measure", "--set", "cpu_fake", "-o", "x.csv"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "single, parallel, recipes, qlora" in err.replace("'", "")


@pytest.mark.parametrize("argv", [["--help"], ["measure", "--set", "parallel", "-o", "x.csv", "--only", "nothing"]])
def test_help_and_usage_errors_never_import_torch(argv):
    done = subprocess.run([sys.executable, "-c", MEMSIM_SAYING_IF_TORCH_LOADED, *argv], capture_output=True, text=True)
    assert done.returncode in (0, 2) and done.stdout.splitlines()[-1] == "False", done.stderr


def typed(text: str) -> object:
    """A CSV cell back as the Python value the harness wrote: None, a bool, an int, a float or the text."""
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@pytest.mark.parametrize("name", list(reference_sets.SETS))
def test_writer_reproduces_the_committed_set_byte_for_byte(tmp_path, name):
    committed = REPO_ROOT / reference_sets.SETS[name].committed
    with open(committed, newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, [{k: typed(v) for k, v in row.items()} for row in reader]
    write_rows(rows, header, tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == committed.read_bytes()


def test_cells_are_spelled_as_committed():
    assert [cell(v) for v in (True, False, None, 0, 2048, 0.1, 1.0, "fsdp")] == \
           ["true", "false", "", "0", "2048", "0.1", "1.0", "fsdp"]


@pytest.mark.parametrize("name", [
    "single", "recipes",
    pytest.param("parallel", marks=pytest.mark.slow),  # its header names parallel_summary's columns: torch
    pytest.param("qlora", marks=pytest.mark.slow),
])
def test_header_is_the_committed_one(name):
    if name in ("parallel", "qlora"):
        pytest.importorskip("torch")
    with open(REPO_ROOT / reference_sets.SETS[name].committed, newline="") as f:
        assert next(csv.reader(f)) == reference_sets.SETS[name].columns()


def test_loop_measures_the_chosen_cases_and_writes_them_once(tmp_path, monkeypatch):
    cases = [("a_s1", "fam1", {"seq_len": 1}), ("b_s2", "fam2", {"seq_len": 2}), ("c_s3", "fam1", {"seq_len": 3})]
    measured = []

    def measure_row(cid, group, case, device):
        measured.append(cid)
        return {"case_id": cid, "family": group, "flag": case["seq_len"] > 1, "measured_allocated_peak_bytes": 10}

    toy = ReferenceSet("toy.csv", lambda: cases, measure_row, lambda: ["case_id", "family", "flag", "missing"])
    monkeypatch.setitem(reference_sets.SETS, "toy", toy)
    log = io.StringIO()
    assert measure_set("toy", chosen_cases("toy", "fam1"), str(tmp_path / "toy.csv"), log=log) == 2
    assert measured == ["a_s1", "c_s3"]  # chosen by their family
    assert (tmp_path / "toy.csv").read_text() == "case_id,family,flag,missing\na_s1,fam1,false,\nc_s3,fam1,true,\n"
    assert len(log.getvalue().splitlines()) == 3 and "2 rows" in log.getvalue()


def test_find_case_looks_in_every_set():
    assert find_case("gpt2-124m_fp32_adamw_eager_s1024_b4")["precision"] == "fp32"
    assert find_case("fsdp2_llama-400m-like_amp_bf16_s2048_b2_dp4_mp_r0")["dp"] == 4
    with pytest.raises(UserError, match="no committed set"):
        find_case("gpt2-124m")


def test_help_examples_name_committed_cases():
    from engine.cli.measure import EXAMPLE

    ids = re.findall(r"--(?:anatomy|compiled) ([\w.-]+)", EXAMPLE)
    assert len(ids) == 2 and all(find_case(cid) for cid in ids)


@pytest.mark.slow
def test_the_gpu_script_runs_its_loop_on_fake_tensors_where_no_gpu_is_lent(tmp_path):
    # benchmarks/gpu_truth.py is what a session lent a GPU runs: here, on fake tensors, its rows are the committed
    # trace's own and memsim's estimate sits beside them; without a GPU, --device cuda is one line and exit 2.
    script = [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_truth.py"), str(tmp_path)]
    case = "gpt2-124m_fp32_sgd_eager_s512_b8"
    done = subprocess.run([*script, "--device", "fake", "--only", case], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "gpu_truth.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok" and row["gpu_allocated_peak_bytes"] == row["trace_allocated_peak_bytes"]
    assert abs(int(row["memsim_allocated_peak_bytes"]) / int(row["trace_allocated_peak_bytes"]) - 1) < 0.01
    no_gpu = subprocess.run(script, capture_output=True, text=True)
    assert no_gpu.returncode == 2 and no_gpu.stderr.count("\n") == 1 and "no CUDA GPU" in no_gpu.stderr
