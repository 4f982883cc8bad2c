"""The time model (engine/model/time.py, step_work.py, gpu_rates.py, collectives.py, flops.py): FLOPs and step times
worked out by hand, the link model, what must move which way, and the calibration against
data/golden/throughput.csv (engine/checks/throughput/)."""

import math

import pytest

from engine.ask.plan_space import precisions
from engine.checks.throughput import calibration, comparison
from engine.checks.throughput.rows import case_of, derivations, prepared, throughput_rows
from engine.model.collectives import BUS_EFFICIENCY, PCIE_HOST_GPUS, group_bytes_per_s, nvlink_domain
from engine.model.flops import attention_core_flops_per_token, matmul_passes, model_flops_per_token
from engine.model.gpu_rates import BF16_EMULATED_SHARE, Rates, gpu_rates
from engine.model.params import param_count
from engine.model.step_work import Work, pipeline_bubble
from engine.model.time import device_times, overlapped
from tests.support import config, outputs

# --- FLOPs by hand -------------------------------------------------------------------------------------------


def test_model_flops_are_6n_plus_12_l_h_s_with_the_embedding_left_out():
    # Llama 3.1 8B, untied: N = 8,030,261,248 - 128,256 x 4,096 = 7,504,924,672 parameters a token multiplies;
    # 6N = 45,029,548,032; 12 L h s = 12 x 32 x 4,096 x 8,192 = 12,884,901,888
    c = config(model="llama-3.1-8b", seq_len=8192)
    assert param_count(c) == 8_030_261_248
    assert model_flops_per_token(c) == 45_029_548_032 + 12_884_901_888


@pytest.mark.parametrize("attention, checkpointing, want", [
    ("flash", "none", 0.5 * 128 * 3.5),   # causal half, backward 2.5 x forward: 224
    ("eager", "none", 128 * 3.0),         # the whole square, backward 2 x forward: 384
    ("flash", "full", 0.5 * 128 * 4.5),   # the forward again: 288
    ("flash", "selective", 0.5 * 128 * 4.5),  # Megatron's selective recomputes the attention core
    ("flash", "selective_op", 0.5 * 128 * 3.5),  # torchtitan's op policy saves the attention output
])
def test_attention_core_flops_by_hand(attention, checkpointing, want):
    # tiny model: s = 4, a = 2, d = 8 / 2 = 4: forward 2 s a (d + d) = 2 x 4 x 2 x 8 = 128 per token
    c = config(seq_len=4, attention=attention, checkpointing=checkpointing)
    assert attention_core_flops_per_token(c) == want


@pytest.mark.parametrize("overrides, want", [
    ({}, 3.0),                                   # forward + input and weight gradients
    ({"lora_rank": 8}, 2.0),                     # a frozen base: no weight gradient
    ({"checkpointing": "full"}, 4.0),            # the forward again
    ({"checkpointing": "full", "checkpoint_every": 2}, 3.5),
    ({"checkpointing": "selective_op"}, 3.5),    # every other matmul again
    ({"checkpointing": "selective"}, 3.0),       # the attention core only
])
def test_matmul_passes(overrides, want):
    assert matmul_passes(config(**overrides)) == want


# --- composition by hand ------------------------------------------------------------------------------------


def work(**overrides) -> Work:
    base = dict(model_flops_per_token=6.0, tokens_per_gpu=50.0, gpu_s_per_mtok=1e6 / 50.0, matmul_flops=1e12,
                matmul_bytes=5e8, expert_flops=0.0, expert_bytes=0.0, attention_flops=2e11, hbm_bytes=3e9,
                optimizer_bytes=1e9, stretch=1.25, tp_bytes=1e9, cp_bytes=0.0, ep_bytes=0.0, pp_bytes=2e9,
                dp_bytes=8e9, dp_window=0.5, host_s=0.0, offload_s=0.5)
    return Work(**(base | overrides))


def rates(**overrides) -> Rates:
    base = dict(s_per_matmul_flop=1e-12, s_per_attention_flop=2e-12, s_per_hbm_byte=1e-9, s_per_peak_flop=0.5e-12,
                s_per_tp_byte=1e-10, s_per_cp_byte=1e-10, s_per_ep_byte=1e-10, s_per_pp_byte=1e-10,
                s_per_dp_byte=1e-9, usd_per_s=0.01)
    return Rates(**(base | overrides))


def test_step_time_by_hand():
    # matmuls max(1e12 x 1e-12, 5e8 x 1e-9) = 1.0 s; attention 0.4 s; memory-bound 3.0 s: compute 4.4 s
    # TP 0.1 s exposed; the stage (4.4 + 0.1) x 1.25 = 5.625 s, + pipeline sends 0.2 s = 5.825 s
    # DP 8.0 s behind 0.5 x 4.4 s of compute: 5.8 s exposed; optimizer 1.0 s; offloaded step 0.5 s
    # 50 tokens per GPU per step; MFU against a 2e12 FLOP/s peak; $0.01 per GPU-second
    times = device_times(work(), rates())
    step = 5.825 + 5.8 + 1.0 + 0.5
    assert times.step_time_s == pytest.approx(step)
    assert times.tokens_per_gpu_s == pytest.approx(50.0 / step)
    assert times.mfu == pytest.approx(6.0 * 50.0 / step / 2e12)
    assert times.cost_per_mtok == pytest.approx(0.01 / (50.0 / step) * 1e6)


def test_matmuls_run_at_the_slower_of_their_flops_and_their_bytes():
    # 2e9 operand bytes at 1 GB/s: 2.0 s, not the 1.0 s of their FLOPs; one more second of compute costs 1.25 s
    # through the bubble and hides 0.5 s more of the DP collectives
    slow = device_times(work(matmul_bytes=2e9), rates()).step_time_s
    assert slow - device_times(work(), rates()).step_time_s == pytest.approx(1.0 * 1.25 - 0.5)


def test_a_collective_hidden_behind_the_compute_costs_nothing():
    assert overlapped(1.0, 2.0) == 0.0 and overlapped(3.0, 2.0) == 1.0


def test_an_unknown_link_gives_an_unknown_time_not_zero():
    assert math.isnan(overlapped(math.nan, 2.0))
    assert math.isnan(device_times(work(), rates(s_per_dp_byte=math.nan)).step_time_s)
    assert not math.isnan(device_times(work(dp_bytes=0.0), rates(s_per_dp_byte=math.nan)).step_time_s)


def test_offloaded_weights_hide_behind_the_compute():
    assert device_times(work(host_s=4.0), rates()).step_time_s == pytest.approx(
        device_times(work(), rates()).step_time_s)  # 4.0 s under 4.4 s of compute
    slow = device_times(work(host_s=5.4), rates()).step_time_s - device_times(work(), rates()).step_time_s
    assert slow == pytest.approx(1.0 * 1.25)  # 1.0 s exposed, stretched by the bubble


def test_pipeline_bubble_is_p_minus_1_over_m_v():
    assert pipeline_bubble(config(n_gpus=8, pp=8, n_layers=16, grad_accum=32)) == 7 / 32
    assert pipeline_bubble(config(n_gpus=8, pp=8, n_layers=16, grad_accum=32, pp_schedule="interleaved",
                                     vpp=2)) == 7 / 64


def test_cost_and_mfu_follow_from_the_throughput_and_the_catalog():
    out = outputs(config(model="llama-3.1-8b", n_gpus=8, zero_stage=3, seq_len=4096, micro_batch=2))
    assert out["cost_per_mtok"] == pytest.approx(6.155 / 3600 / out["tokens_per_gpu_s"] * 1e6)
    flops = model_flops_per_token(config(model="llama-3.1-8b", seq_len=4096))
    assert out["mfu"] == pytest.approx(flops * out["tokens_per_gpu_s"] / 989.4e12)


def test_an_unpriced_gpu_has_a_time_but_no_cost():
    out = outputs(config(model="llama-3.1-8b", gpu="a100-sxm-40gb", n_gpus=8, zero_stage=3))
    assert out["tokens_per_gpu_s"] > 0 and math.isnan(out["cost_per_mtok"])


# --- links ------------------------------------------------------------------------------------------------------


def test_a_group_inside_a_node_runs_on_nvlink():
    # H100 SXM: 450 GB/s NVLink per direction, at BUS_EFFICIENCY
    assert group_bytes_per_s(config(n_gpus=8), 1, 8) == BUS_EFFICIENCY * 450e9


def test_a_group_across_nodes_gets_its_ranks_per_node_times_each_nic():
    # 16 ranks, 8 per node, 50 GB/s each: 400 GB/s (under the 450 of NVLink)
    assert group_bytes_per_s(config(n_gpus=16), 1, 16) == pytest.approx(BUS_EFFICIENCY * 400e9)
    # the data-parallel group of tp = 8: one rank per node, one NIC
    assert group_bytes_per_s(config(n_gpus=16), 8, 2) == pytest.approx(BUS_EFFICIENCY * 50e9)


def test_an_nvl72_domain_keeps_a_64_gpu_group_on_nvlink():
    c = config(gpu="gb200", n_gpus=64, nvlink_domain_gpus=72)
    assert group_bytes_per_s(c, 1, 64) == BUS_EFFICIENCY * 900e9
    assert group_bytes_per_s(config(gpu="gb200", n_gpus=64), 1, 64) == pytest.approx(BUS_EFFICIENCY * 200e9)


# --- what moves which way -----------------------------------------------------------------------------------------

BIG = dict(model="llama-3.1-70b", n_gpus=64, seq_len=4096, micro_batch=1, zero_stage=3, checkpointing="full")


def tokens_per_gpu_s(**overrides) -> float:
    return outputs(config(**(BIG | overrides)))["tokens_per_gpu_s"]


@pytest.mark.parametrize("slower, faster", [
    ({"checkpointing": "full"}, {"checkpointing": "selective_op"}),
    ({"gpu": "a100-sxm-80gb"}, {"gpu": "h100-sxm-80gb"}),
    ({}, {"precision": "fp8"}),
    ({"bandwidth_bytes_per_s": 2e12}, {"bandwidth_bytes_per_s": 4e12}),
    ({"tp": 8, "pp": 4, "grad_accum": 8}, {"tp": 8, "pp": 4, "grad_accum": 64}),  # a smaller bubble
    ({"tp": 8, "pp": 4, "grad_accum": 8}, {"tp": 8, "pp": 4, "grad_accum": 8, "pp_schedule": "interleaved", "vpp": 2}),
    ({"attention": "eager"}, {"attention": "flash"}),
    ({"offload": "optimizer"}, {}),
])
def test_faster_settings_are_faster(slower, faster):
    assert tokens_per_gpu_s(**slower) < tokens_per_gpu_s(**faster)


def test_bf16_runs_emulated_where_the_tensor_cores_multiply_fp16_only():
    # V100 (Volta): bf16's matmuls and attention at BF16_EMULATED_SHARE of the fp16 rate; an A100 runs both alike
    volta, ampere = dict(gpu="v100-sxm2-32gb", model="llama-3.2-1b"), dict(gpu="a100-sxm-80gb", model="llama-3.2-1b")
    for precision in ("amp_bf16", "bf16"):
        emulated, native = gpu_rates(config(**volta, precision=precision), None), gpu_rates(
            config(**volta, precision=precision.replace("bf16", "fp16")), None)
        assert emulated.s_per_matmul_flop * BF16_EMULATED_SHARE == pytest.approx(native.s_per_matmul_flop)
        assert emulated.s_per_attention_flop * BF16_EMULATED_SHARE == pytest.approx(native.s_per_attention_flop)
    bf16, fp16 = (gpu_rates(config(**ampere, precision=p), None) for p in ("amp_bf16", "amp_fp16"))
    assert bf16 == fp16
    assert tokens_per_gpu_s(gpu="v100-sxm2-32gb") < tokens_per_gpu_s(gpu="v100-sxm2-32gb", precision="amp_fp16")


def test_the_plan_offers_fp16_where_bf16_runs_emulated():
    assert precisions(config(gpu="v100-sxm2-32gb", precision="amp_bf16")) == ["amp_bf16", "bf16", "amp_fp16", "fp16"]
    assert precisions(config(gpu="a100-sxm-80gb", precision="amp_bf16")) == ["amp_bf16", "bf16"]


def test_a_faster_network_is_faster_where_the_collectives_are_exposed():
    # FSDP of an 8B model at one 2,048-token sample per GPU on 8 nodes: the gathers outlast the compute
    fsdp = dict(model="llama-3.1-8b", n_gpus=64, seq_len=2048, micro_batch=1, zero_stage=3, checkpointing="none")
    speeds = [tokens_per_gpu_s(**fsdp, inter_node_bytes_per_s=b) for b in (6.25e9, 25e9, 100e9)]
    assert speeds == sorted(speeds) and speeds[0] < speeds[-1]


@pytest.mark.parametrize("n_gpus", [(8, 16), (16, 32), (32, 64)])
def test_ddp_throughput_per_gpu_never_grows_with_more_gpus(n_gpus):
    # the gradient all-reduce only grows with the group (and leaves NVLink past 8 GPUs); with ZeRO the optimizer
    # step shrinks with the group instead, so there more GPUs may be faster per GPU
    ddp = dict(model="llama-3.1-8b", micro_batch=1, zero_stage=0, checkpointing="none")
    small, large = (tokens_per_gpu_s(**ddp, n_gpus=n) for n in n_gpus)
    assert large <= small


# --- calibration ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    return comparison.throughput_results()


@pytest.mark.slow  # 98 rows through explain: the accuracy tier
def test_calibration_set_median_error_meets_the_issue_target(results):
    assert comparison.summary(results)["all"]["median_abs_pct"] <= comparison.MEDIAN_TOL_PCT


@pytest.mark.slow  # 98 rows through explain: the accuracy tier
def test_the_rows_outside_30_percent_are_exactly_the_known_misses(results):
    # issue #16 asks max <= 30%: these rows break it, each with its reason in comparison.KNOWN_MISSES
    missed = {r["case_id"] for r in results if r["ok"] is False}
    assert missed == set(comparison.KNOWN_MISSES)


@pytest.mark.slow  # 98 rows through explain: the accuracy tier
def test_every_row_is_compared_uneven_pipeline_splits_included(results):
    # Llama 3.1 405B (126 layers) and DeepSeek-V3 (61) on 4-16 stages: valid rows since memsim splits layers
    # unevenly (split.virtual_stage_layers)
    rows = {r["case_id"]: r for r in throughput_rows()}
    layers = {"llama-3.1-405b": 126, "deepseek-v3": 61}
    uneven = [r for r in results if layers.get(rows[r["case_id"]]["model"], 0) % int(rows[r["case_id"]]["pp"] or 1)]
    assert uneven and all(r["error_pct"] is not None for r in results)


def test_grad_accum_comes_from_the_global_batch_where_the_source_leaves_it_out():
    rows = {r["case_id"]: r for r in throughput_rows()}
    # Narayanan Table 1, 39.1B: global batch 1536 over dp 32 at micro-batch 1 (assumed): 48 micro-batches
    assert case_of(rows["megatron-t1-05"])["grad_accum"] == 48
    assert case_of(rows["megatron-t1-05"])["micro_batch"] == 1
    # printed GA 2 contradicts GBS 512 / (MBS 4 x DP 16) = 8: the global batch is what tokens/s counts
    assert case_of(rows["mbridge-h100-gptoss-120b"])["grad_accum"] == 8
    assert "grad_accum" not in derivations(rows["mpt-h100-70b-2048-64g"])  # printed and consistent


def test_unstated_virtual_stages_and_nvlink_domains_take_their_systems_defaults():
    rows = {r["case_id"]: r for r in throughput_rows()}
    assert case_of(rows["torchtitan-h100-405b-interleaved"])["vpp"] == 2  # torchtitan's default
    assert case_of(rows["mbridge-gb200-dsv3-bf16"])["nvlink_domain_gpus"] == 72  # an NVL72 rack
    assert "nvlink_domain_gpus" not in case_of(rows["mbridge-b200-llama3-8b"])


def test_torchtitan_h100_rows_run_at_their_gpus_memory_bandwidth():
    rows = {r["case_id"]: r for r in throughput_rows()}
    assert case_of(rows["torchtitan-h100-8b-8g-fsdp"])["bandwidth_bytes_per_s"] == 2.4e12
    assert "bandwidth_bytes_per_s" not in case_of(rows["mpt-h100-70b-2048-64g"])


def test_every_calibrated_constant_is_inside_its_fit_range():
    for name, (lo, hi) in calibration.CALIBRATED.items():
        assert lo < calibration.current(name) < hi, name


@pytest.mark.slow
def test_a_fresh_fit_finds_the_constants_the_model_holds():
    # the constants are the fit's, rounded to three figures: not tuned by hand
    found = calibration.fit(calibration.comparable(prepared(throughput_rows())))
    for name, value in found.items():
        assert calibration.current(name) == pytest.approx(value, rel=0.01), name


@pytest.mark.slow
def test_sources_left_out_of_the_fit_are_predicted_about_as_well():
    loso = calibration.leave_one_source_out()
    held = [abs(e) for found in loso.values() for e in found["errors"].values()]
    assert sorted(held)[len(held) // 2] <= comparison.MEDIAN_TOL_PCT


def test_desktop_cards_share_one_host_over_pcie():
    # rtx-4090: one GPU per catalog node and no network link (issue #22: 2 x RTX 4090 had no time at all)
    two = config(model="llama-3.2-1b", gpu="rtx-4090", n_gpus=2)
    assert nvlink_domain(two) == PCIE_HOST_GPUS
    assert group_bytes_per_s(two, 1, 2) == BUS_EFFICIENCY * two.intra_node_bytes_per_s
    assert outputs(two)["tokens_per_gpu_s"] > 0
    assert math.isnan(outputs(config(model="llama-3.2-1b", gpu="rtx-4090", n_gpus=16))["tokens_per_gpu_s"])
    # a node of several GPUs with no network in the catalog (l40s) still has no time beyond it
    assert math.isnan(outputs(config(model="llama-3.2-1b", gpu="l40s", n_gpus=16))["tokens_per_gpu_s"])
