"""Reserved memory: explain's slack parts add up, and FSDP's side-stream pools follow the replayed traces.

The committed measured sets carry `measured_reserved_peak_bytes`, each traced step replayed through the
caching-allocator model with FSDP2's buffers on the streams that allocate them (engine/checks/reserved.py)."""

import statistics

from engine.ask.explain import slack_parts
from engine.ask.evaluate import evaluate_case
from engine.checks.reserved import reserved_results
from engine.checks.validate import config_of, measured_rows
from engine.model.sharding import fsdp
from tests.test_temporaries import cases

# The FSDP2 families whose allocated peak memsim follows step by step; fsdp2_ckpt and fsdp2_offload keep the
# single-stream fragmentation of recomputation and of offloading that the 1/16 rule does not (PARALLEL.md).
STREAM_FAMILIES = ("fsdp2", "fsdp2_noreshard", "fsdp2_split", "fsdp2_tp")


def test_slack_parts_add_up_and_stream_pools_come_only_with_fsdp():
    seen = {True: 0, False: 0}
    for case in cases(120):
        result = evaluate_case(case)
        if result["allocated_peak_bytes"] < 0:
            continue
        parts = dict(slack_parts(result))
        assert sum(parts.values()) == result["reserved_peak_bytes"] - result["allocated_peak_bytes"], case
        sharded = bool(fsdp(result["record"]))
        assert ("FSDP stream pools" in parts) == sharded, case
        seen[sharded] += 1
    assert min(seen.values()) > 10  # both kinds of step are sampled


def test_fsdp_reserved_follows_the_stream_tagged_replays():
    rows = [r for r in measured_rows() if r.get("family") in STREAM_FAMILIES]
    results = reserved_results(rows)
    errors = [r["error_pct"] for r in results]
    assert len(errors) == len(rows) >= 15
    assert statistics.median(map(abs, errors)) <= 5.0, errors
    # what the side streams hold is most of the gap: without them memsim would be low on every row
    without = [100 * (r["memsim_gib"] - side - r["reference_gib"]) / r["reference_gib"]
               for r, side in zip(results, stream_pool_gib(rows))]
    assert statistics.median(without) < -8.0 < statistics.median(errors), without


def stream_pool_gib(rows):
    for row in rows:
        parts = dict(slack_parts(evaluate_case(config_of(row, by_dims=True))))
        yield parts.get("FSDP stream pools", 0) / 2**30


def test_recomputed_steps_keep_a_loss_sized_block():
    """One GPU, full recomputation, transformers' loss: between micro-steps the fp32 logits' freed segments are
    cut up by blocks that outlive them, and the replays reserve whole segments of that size again; 1/16 of the
    churn alone leaves memsim low on most of these rows (overhead.allocator_slack_bytes)."""
    rows = [r for r in measured_rows() if r["checkpointing"] == "full" and r.get("loss_impl") in (None, "", "standard")
            and int(r.get("n_gpus") or 1) == 1]
    results = reserved_results(rows)
    errors = [r["error_pct"] for r in results]
    without = list(without_parts(rows, results, ("loss-sized block cut up", "loss blocks cut again")))
    assert len(rows) >= 40
    assert statistics.median(without) < -10.0, without
    assert statistics.median(errors) > -5.0, errors


def test_optimizer_states_cut_the_loss_blocks_again():
    """The first optimizer step's states settle in the loss's freed segments, and the next step's loss cuts its
    blocks again (overhead.loss_recut_bytes): on the replayed rows where memsim counts such blocks, leaving them out
    puts four times as many rows under -10% or more."""
    rows = [r for r in measured_rows() if r.get("measured_reserved_peak_bytes")]
    results = reserved_results(rows)
    recut = [dict(slack_parts(evaluate_case(config_of(row, by_dims=True)))).get("loss blocks cut again", 0)
             for row in rows]
    rows = [row for row, size in zip(rows, recut) if size > 0]
    results = [r for r, size in zip(results, recut) if size > 0]
    errors = [r["error_pct"] for r in results]
    without = list(without_parts(rows, results, ("loss blocks cut again",)))
    assert len(rows) >= 40
    assert abs(statistics.median(errors)) < 2.0 < -statistics.median(without), (errors, without)
    assert 4 * sum(e < -10 for e in errors) <= sum(e < -10 for e in without), (errors, without)


def without_parts(rows, results, causes):
    """Each row's error with memsim's slack parts named by `causes` taken out (explain.slack_parts)."""
    for row, r in zip(rows, results):
        parts = dict(slack_parts(evaluate_case(config_of(row, by_dims=True))))
        taken = sum(parts.get(cause, 0) for cause in causes) / 2**30
        yield 100 * (r["memsim_gib"] - taken - r["reference_gib"]) / r["reference_gib"]


def test_loss_recut_is_the_states_beyond_freed_activations_and_one_block():
    """overhead.loss_recut_bytes, hand-worked with a 1 GiB loss block: the first block of states beyond the freed
    activations fills the block memsim keeps already, the next two blocks' worth cut the loss's other two again."""
    from types import SimpleNamespace

    from engine.model.overhead import loss_recut_bytes

    gib, step = 2**30, SimpleNamespace(optimizer_in_backward=False)
    assert loss_recut_bytes(step, 3 * gib, 2 * gib, gib) == 0  # the freed activations and the kept block hold them
    assert loss_recut_bytes(step, 5 * gib, 2 * gib, gib) == 2 * gib
    assert loss_recut_bytes(step, 9 * gib, 2 * gib, gib) == 2 * gib  # no more than the loss's other two blocks
    assert loss_recut_bytes(step, 9 * gib, 2 * gib, 0) == 0  # expandable segments: no block kept
    assert loss_recut_bytes(SimpleNamespace(optimizer_in_backward=True), 9 * gib, 0, gib) == 0


def test_recompute_pins_the_intermediates_segments():
    """stage.pinned_segment_bytes, hand-worked on Llama 2 7B with LoRA at micro-batch 6 and 2,048 tokens (the replay
    PARALLEL.md describes): 258 MiB intermediates hold two 96 MiB inputs each, so 16 segments for 32 layers, 1,056
    MiB beyond the inputs; none with expandable segments, without recomputation, with the inputs on the host, or
    under autocast (the fp32 input, 192 MiB, is more than half an intermediate)."""
    case = {"model": "llama-2-7b", "gpu": "rtx-3090", "precision": "bf16", "checkpointing": "full", "seq_len": 2048,
            "micro_batch": 6, "lora_rank": 64, "lora_targets": "all_linear"}
    intermediate, inputs = 6 * 2048 * 11008 * 2, 6 * 2048 * 4096 * 2
    assert dict(slack_parts(evaluate_case(case)))["recompute's pinned segments"] == 16 * intermediate - 32 * inputs
    for other in ({"allocator": "expandable"}, {"checkpointing": "none"}, {"activation_offload": True},
                  {"precision": "amp_bf16"}):
        assert "recompute's pinned segments" not in dict(slack_parts(evaluate_case(case | other))), other


def test_measured_file_without_replays_is_one_line(tmp_path, capsys):
    """`python -m engine.checks.reserved --measured CSV` given a case list rather than `memsim measure`'s output."""
    from engine.checks.reserved import main

    cases = tmp_path / "cases.csv"
    cases.write_text("n_layers,d_model\n2,64\n")
    assert main(["--measured", str(cases)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no measured_reserved_peak_bytes" in err
