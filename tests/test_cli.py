"""Every subcommand, as a user runs it: real files, exit codes, one-line errors and no tracebacks."""

import json
import re

import polars as pl
import pytest

from engine.cli import COMMANDS, build_parser, main

LAUNCH = ["explain", "--model", "llama-2-13b", "--gpu", "a100-sxm-80gb", "--n-gpus", "8", "--zero-stage", "3",
          "--checkpointing", "full", "--precision", "amp_bf16", "--micro-batch", "4"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_subcommand_has_help_with_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert p.epilog and "Example:" in p.epilog, name


@pytest.mark.parametrize("command", [c.__name__.rsplit(".", 1)[-1] for c in COMMANDS])
def test_every_subcommand_help_prints(capsys, command):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0 and "Example:" in capsys.readouterr().out


def test_gpu_memory_takes_a_unit_and_sets_capacity_bytes(capsys):
    for given, capacity in (("48GiB", 48 * 2**30), ("80GB", 80 * 10**9), ("24576 MiB", 24 * 2**30)):
        code, out, err = run(capsys, "explain", "--model", "llama-3.2-1b", "--gpu", "rtx-4090", "--gpu-memory", given, "--json")
        r = json.loads(out)
        assert code == 0 and r["outputs"]["capacity_bytes"] == capacity, err
        assert f"rtx-4090 resized to {capacity / 2**30:.1f} GiB" in r["summary"]
    assert json.loads(run(capsys, "explain", "--capacity-bytes", "24GiB", "--json")[1])["outputs"]["capacity_bytes"] == 24 * 2**30
    for argv, needle in ((["--gpu-memory", "24G"], "takes a size such as 24GiB"),
                         (["--gpu-memory", "24GiB", "--capacity-bytes", "1"], "give one"),
                         (["--gpu-memory", "0GB"], "more than 0")):
        code, _, err = run(capsys, "explain", *argv)
        assert code == 2 and needle in err and err.count("\n") == 1


def test_explain_json_outputs_are_the_columns_estimate_writes(capsys):
    from engine.ask.estimate import estimate_table

    case = dict(zip(LAUNCH[1::2], LAUNCH[2::2]))
    want = estimate_table([{k.removeprefix("--").replace("-", "_"): v for k, v in case.items()}]).to_pylist()[0]
    outputs = json.loads(run(capsys, *LAUNCH, "--json")[1])["outputs"]
    assert outputs == {k: want[k] for k in outputs}
    assert outputs["peak_phase"] in ("forward", "backward", "optimizer") and outputs["fits"] is True
    assert outputs["invalid_reason"] is None and isinstance(outputs["bottleneck"], str)


def test_explain_states_where_its_price_comes_from(capsys):
    from engine.catalogs import catalog

    entry = catalog.resolve_gpu("a100-sxm-80gb")
    r = json.loads(run(capsys, *LAUNCH, "--json")[1])
    assert (r["usd_per_gpu_hour"], r["price_source"], r["price_date"]) == (
        entry["usd_per_hour"], entry["price_source"], entry["price_date"])
    text = run(capsys, *LAUNCH)[1]
    assert f"(${entry['usd_per_hour']:.2f}/GPU-hour, {entry['price_source'].split(',')[0]}, read {entry['price_date']})" in text
    given = json.loads(run(capsys, *LAUNCH, "--usd-per-hour", "1.5", "--json")[1])
    assert (given["usd_per_gpu_hour"], given["price_source"], given["price_date"]) == (1.5, "given (usd_per_hour)", None)


def test_explain_prints_the_breakdown_and_verdict(capsys):
    code, out, _ = run(capsys, *LAUNCH)
    assert code == 0
    for word in ("weights", "optimizer states", "activations", "device peak", "peak phase", "bottleneck"):
        assert word in out
    assert "FITS" in out or "DOES NOT FIT" in out


def test_explain_json_components_add_up_to_the_device_peak(capsys):
    _, out, _ = run(capsys, *LAUNCH, "--json")
    r = json.loads(out)
    assert sum(r["breakdown_bytes"].values()) == r["outputs"]["device_peak_bytes"]
    assert r["margin_bytes"] == r["usable_bytes"] - r["outputs"]["device_peak_bytes"]


def test_explain_suggests_changes_that_make_it_fit(capsys):
    _, out, _ = run(capsys, "explain", "--model", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--n-gpus", "8",
                       "--micro-batch", "8", "--seq-len", "8192", "--json")
    r = json.loads(out)
    assert not r["fits"] and r["plan"][-1]["fits"]
    peaks = [s["device_peak_bytes"] for s in r["plan"]]
    assert peaks == sorted(peaks, reverse=True)  # every step helps


def test_explain_suggests_a_recipe_knob_only_when_it_lowers_the_peak():
    from engine.ask.explain import evaluate_case, suggestions

    def changes(seq_len):  # llama-3.1-8b on one H100: AdamW foreach, the standard loss, no recomputation
        case = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "seq_len": seq_len}
        result = evaluate_case(case)
        found = suggestions(case, result, limit=100)
        assert all(s["device_peak_bytes"] < result["device_peak_bytes"] for s in found)
        return [s["change"] for s in found]

    long = changes(8192)  # the peak is in backward: activation knobs help, the optimizer's step buffers do not
    for knob in ("chunked cross-entropy", "fused linear cross-entropy", "op-level selective", "activation offload",
                 "8-bit AdamW", "pure bf16", "LoRA r=16", "QLoRA r=16", "torch.compile"):
        assert any(change.startswith(knob) for change in long), knob
    assert not any(change.startswith(("the fused optimizer", "the optimizer step in")) for change in long)
    fsdp2 = {"model": "llama-2-13b", "n_gpus": 8, "zero_stage": 3, "checkpointing": "full", "micro_batch": 4,
             "gpu": "a100-sxm-40gb"}  # plain autocast over FSDP2's fp32 gathers caches a bf16 copy of every weight
    assert any(s["change"].startswith("FSDP2 with a MixedPrecisionPolicy")
               for s in suggestions(fsdp2, evaluate_case(fsdp2), limit=100))
    short = changes(2048)  # the peak is the optimizer step: a fused step and the step in backward lower it
    assert any(c.startswith("the fused optimizer") for c in short)
    assert any(c.startswith("the optimizer step in backward") for c in short)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["explain", "--model", "llama-3.1-8c"], "did you mean"),
        (["explain", "--gpu", "h100-sxm"], "did you mean"),
        (["explain", "--model", "llama-2-13b", "--tp", "3", "--n-gpus", "3"], "tp does not divide n_heads"),
        (["explain", "--micro-batch", "0"], "micro_batch must be at least 1"),
        (["explain", "--seq-len", "-5"], "seq_len must be at least 1"),
        (["explain", "--precision", "bf32"], "accepted: fp32"),
        (["explain", "--model", "tests/fixtures/does-not-exist.json"], "no such model config file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_flag_written_with_underscores_names_the_flag_meant(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["explain", "--micro_batch", "4", "--seq_len=4096", "--bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert "--micro_batch -> --micro-batch, --seq_len -> --seq-len)" in err and "--bogus ->" not in err


def test_malformed_config_json_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "explain", "--model", str(bad))
    assert code == 2 and "config.json" in err and "Traceback" not in err


def test_estimate_writes_every_output_beside_the_inputs(capsys, tmp_path):
    cases = tmp_path / "cases.csv"
    cases.write_text("model,gpu,n_gpus,tp,micro_batch,seq_len\nllama-3.1-8b,h100,8,2,2,4096\ngpt2,rtx-4090,,,4,\n")
    out = tmp_path / "est.parquet"
    code, text, _ = run(capsys, "estimate", str(cases), "-o", str(out))
    assert code == 0 and "2 configurations" in text
    df = pl.read_parquet(out)
    assert df["model"].to_list() == ["llama-3.1-8b", "gpt2"] and df["gpu"].to_list() == ["h100-sxm-80gb", "rtx-4090"]
    assert df["dp"].to_list() == [4, 1] and df["seq_len"].to_list() == [4096, 2048]  # empty cell = default
    assert {"device_peak_bytes", "fits", "peak_phase", "bottleneck", "valid", "invalid_reason"} <= set(df.columns)


def test_estimate_keeps_invalid_rows_with_their_reason(capsys, tmp_path):
    cases = tmp_path / "cases.csv"
    cases.write_text("model,n_gpus,tp\nllama-3.1-8b,8,3\n")
    out = tmp_path / "est.parquet"
    assert run(capsys, "estimate", str(cases), "-o", str(out))[0] == 0
    df = pl.read_parquet(out)
    assert df["valid"].to_list() == [False] and "n_gpus is not" in df["invalid_reason"][0]


def test_estimate_unknown_column_names_it(capsys, tmp_path):
    cases = tmp_path / "cases.csv"
    cases.write_text("model,microbatch\nllama-3.1-8b,2\n")
    code, _, err = run(capsys, "estimate", str(cases), "-o", str(tmp_path / "x.parquet"))
    assert code == 2 and "unknown column 'microbatch'" in err and "micro_batch" in err


def test_validate_table_columns_line_up_whatever_the_cells_hold():
    from engine.checks.validate import render

    memory = [{"case_id": "a-very-long-case-identifier-from-a-published-source-0123456789", "group": "g",
               "metric": "device_peak_upper_bound_of_a_kind", "reference_gib": 0.025, "memsim_gib": 12.551,
               "error_pct": 50105.1, "ok": None},
              {"case_id": "short", "group": "a-group-name-longer-than-twenty-four", "metric": "activations",
               "reference_gib": 0.554, "memsim_gib": -0.0001, "error_pct": -100.0, "ok": True}]
    speed = [{"case_id": "run-1", "group": "throughput:x", "gpu": "h100-sxm-80gb", "metric": "tokens_per_gpu_s",
              "reference": 3000.0, "memsim": 12345.6, "error_pct": 311.5, "ok": False},
             {"case_id": "run-2-with-a-longer-name", "group": "throughput:x", "gpu": "a10", "metric": "tokens_per_gpu_s",
              "reference": 31000.0, "memsim": 950.0, "error_pct": None, "ok": None, "why_not": "no comparable figure"}]
    lines = render(memory + speed).splitlines()
    table, speed_table = lines[:3], lines[4:7]
    for rows, columns in ((table, ("metric", "reference GiB", "memsim GiB", "error")), (speed_table, ("GPU", "memsim"))):
        for column in columns:
            at = rows[0].index(column)
            right = column not in ("metric", "GPU")  # numbers end where their header ends
            edge = at + len(column) - 1 if right else at
            assert all(r[edge] != " " and r[edge + (1 if right else -1)] == " " for r in rows if len(r) > edge), column
    assert "-0.000" not in "\n".join(lines) and "12.551  +50105.1%" in table[1]


def test_explain_never_waits_for_a_compiler(capsys, monkeypatch):
    from engine.model import kernel

    warm = run(capsys, *LAUNCH)
    monkeypatch.setattr(kernel, "loaded", lambda k: False)  # a fresh process
    monkeypatch.setattr(kernel, "cold", lambda k: True)  # a cold cache: a compile would take a minute
    monkeypatch.setattr(kernel, "sweep_chunk", None)  # and the compiled kernel is never called
    assert run(capsys, *LAUNCH) == warm and warm[2] == ""  # a few rows answer in Python, with no notice


@pytest.mark.slow  # it runs the compiled kernel: the fast tier never compiles
def test_many_rows_on_a_cold_cache_say_once_that_the_kernel_compiles(monkeypatch, caplog):
    import numpy as np

    from engine.configure.resolve import resolve_case
    from engine.inputs.vocabulary import RECORD
    from engine.model import kernel

    rec = resolve_case({"model": "gpt2"})[0]
    many = int(kernel.KERNEL_COMPILE_SECONDS / kernel.PYTHON_SECONDS_PER_ROW) + 1  # a compile pays off
    monkeypatch.setattr(kernel, "loaded", lambda k: False)  # as in a fresh process
    monkeypatch.setattr(kernel, "cold", lambda k: True)
    with caplog.at_level("WARNING", logger="memsim"):
        kernel.evaluate(np.repeat(np.array([rec], dtype=RECORD), 10))
        assert caplog.messages == []
        out = kernel.evaluate(np.repeat(np.array([rec], dtype=RECORD), many))
    assert len(caplog.messages) == 1 and caplog.messages[0].startswith("compiling the kernel (first run only, about")
    assert len(set(out["device_peak_bytes"])) == 1


def test_a_kernel_without_a_cache_index_is_cold():
    from engine.model.kernel import cold

    class Index:
        def __init__(self, found):
            self.found = found

        def _load_index(self):
            return self.found

    def kernel(found):
        return type("Kernel", (), {"_cache": type("Cache", (), {"_cache_file": Index(found)})()})()

    assert cold(kernel({})) and not cold(kernel({"sig": "entry"}))
    assert not cold(lambda: None)  # NUMBA_DISABLE_JIT: a plain function, nothing compiles


def test_readme_links_resolve_inside_the_repository_and_say_how_to_get_cpu_torch():
    from engine import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", readme) if "://" not in t]
    assert "docs/config.md" in links
    for target in links:
        path = (REPO_ROOT / target).resolve()
        assert path.is_relative_to(REPO_ROOT) and path.exists(), target
    assert "../shared/CONFIG.md" not in readme
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme


@pytest.mark.slow  # 98 throughput rows through explain: the accuracy tier
def test_validate_holds_throughput_to_its_tolerance_less_the_known_misses(capsys):
    code, out, err = run(capsys, "validate", "--set", "throughput")
    assert code == 0, err  # the known misses are printed (MISS), not failures
    assert "published tokens/s/GPU" in out and "MISS (known, THROUGHPUT.md)" in out


def test_a_compile_says_how_long_it_has_taken_until_it_returns(caplog):
    import time

    from engine.model import kernel

    with caplog.at_level("WARNING", logger="memsim"):
        with kernel.announced_compile(kernel.sweep_chunk, seconds=120, every=0.05):
            time.sleep(0.5)
        said = len(caplog.messages)
        time.sleep(0.2)  # the ticker stops with the compile
    assert caplog.messages[0].startswith("compiling the kernel (first run only, about 120 s")
    assert 3 <= said - 1 <= 10 and all(m.startswith("still compiling: ") for m in caplog.messages[1:])
    assert len(caplog.messages) == said


def readme_examples(command: str) -> list[tuple[list[str], str]]:
    """README's ```text blocks that show `$ memsim <command> ...`: (its arguments, what it printed)."""
    from engine import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```text\n\$ memsim (" + command + r" [^\n]*)\n(.*?)```", readme, re.S)
    return [(line.split(), shown) for line, shown in blocks]


def test_readme_explain_examples_are_what_explain_prints(capsys):
    examples = readme_examples("explain")
    assert len(examples) >= 2
    for argv, shown in examples:
        code, out, _ = run(capsys, *argv)
        assert code == 0 and out == shown, " ".join(argv)


@pytest.mark.slow  # the plan runs the compiled kernel
def test_readme_plan_example_is_what_plan_prints(capsys):
    (argv, shown), = readme_examples("plan")
    code, out, _ = run(capsys, *argv)
    seconds = re.compile(r"sweep kernel, [0-9.]+ s\)")  # how long the search took: the machine's, not memsim's
    assert code == 0 and seconds.sub("", out) == seconds.sub("", shown)
