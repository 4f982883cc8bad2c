"""engine/checks/peers/: the three peer tools reproduce what they print, and hand-worked cases.

DeepSpeed: every `ds-` row of data/golden/published.csv, to the printed rounding. Megatron: a tiny case worked
by hand, and GPT-3 175B (Korthikanti et al. 2022, Table 3 configuration) where SP + selective recompute gives
Table 2's sbh*34/t per layer. llm-analysis: a tiny case worked by hand.
"""

import csv
from fractions import Fraction
from pathlib import Path

import pytest

from engine.checks import peers

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "published.csv"
DS_ROWS = [r for r in csv.DictReader(GOLDEN.open()) if r["case_id"].startswith("ds-")]
INT_COLUMNS = ["n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab", "n_params", "n_gpus", "tp", "pp",
               "dp", "zero_stage"]


def ds_record(row):
    """The record of a CSV row, built directly (no catalog): an empty tied_embeddings cell means untied."""
    fields = {k: int(row[k]) for k in INT_COLUMNS if row[k]}
    fields.update(ffn_type=row["ffn_type"], offload=row["offload"], tied_embeddings=row["tied_embeddings"] == "true")
    return peers.record(**fields)


def test_golden_has_the_deepspeed_rows():
    assert len(DS_ROWS) == 14


@pytest.mark.parametrize("row", DS_ROWS, ids=[r["case_id"] for r in DS_ROWS])
def test_deepspeed_estimator_rows_reproduce_to_the_printed_rounding(row):
    c = ds_record(row)
    # The documented ZeRO-2 output predates DeepSpeed PR #5099 (4P + 16P/N); ZeRO-3 is unchanged.
    gpu = peers.deepspeed_zero_estimate(c, legacy_zero2=c.zero_stage == 2)
    value = float(row["value_gib"])
    if row["case_id"].startswith("ds-t5l-"):  # memory.rst's worked example prints MB via >> 20 (MiB)
        assert gpu >> 20 == round(value * 1024)
    else:  # the *_all_live printers: f"{gpu_mem/2**30:6.2f}GB"
        assert f"{gpu / 2**30:.2f}" == f"{value:.2f}"


@pytest.mark.parametrize("prefix, total, largest", [
    ("ds-t0-", "2783M", "65M"),  # 'SW: Model with 2783M total params, 65M largest layer params.'
    ("ds-t53b-", "2851M", "32M"),  # 'SW: Model with 2851M total params, 32M largest layer params.'
])
def test_deepspeed_params_print_as_the_estimator_does(prefix, total, largest):
    c = ds_record(next(r for r in DS_ROWS if r["case_id"].startswith(prefix)))
    # T0_3B: the CSV count includes the untied lm_head; AutoModel (T5Model) has none: 2,849,757,184 - 32128*2048
    assert f"{int(peers.deepspeed_params(c) / 1e6)}M" == total
    assert f"{int(peers.python_body(peers._params.largest_layer_params)(c) / 1e6)}M" == largest


def test_deepspeed_t5_large_counts_match_the_worked_example():
    c = ds_record(next(r for r in DS_ROWS if r["case_id"].startswith("ds-t5l-")))
    assert f"{peers.deepspeed_params(c) / 1e6:.2f}M" == "737.67M"  # 'total params: 737.67M'
    assert f"{peers.python_body(peers._params.largest_layer_params)(c) / 1e6:.2f}M" == "32.90M"


def test_deepspeed_current_zero2_formula_differs_from_the_documented_output():
    c = ds_record(next(r for r in DS_ROWS if r["case_id"] == "ds-t53b-z2-none"))
    # current: 2P + int(18P/8) = 5,702,000,000 + 6,414,750,000 bytes = 11.28 GiB (documented: 15.93)
    assert peers.deepspeed_zero_estimate(c) == 2 * 2_851_000_000 + int(18 * 2_851_000_000 / 8)
    assert f"{peers.deepspeed_zero_estimate(c) / 2**30:.2f}" == "11.28"


@pytest.mark.parametrize("case_id, per_cpu", [
    ("ds-t0-1g-none", "0.37"),  # ' 0.37GB |  46.91GB | offload_param=none, offload_optimizer=none, zero_init=1'
    ("ds-t0-1g-opt", "62.23"),
    ("ds-t0-1g-all", "70.00"),
    ("ds-t0-2g-none", "0.74"),
    ("ds-t0-2g-opt", "62.23"),
    ("ds-t0-2g-all", "70.00"),
])
def test_deepspeed_host_side_reproduces_the_per_cpu_column(case_id, per_cpu):
    c = ds_record(next(r for r in DS_ROWS if r["case_id"] == case_id))
    assert f"{peers.deepspeed_zero_estimate_host(c) / 2**30:.2f}" == per_cpu


@pytest.mark.parametrize("zero_stage, offload, per_cpu", [
    (2, "none", "127.48"), (3, "optimizer", "63.74"), (3, "optimizer_params", "71.71"),
])
def test_deepspeed_host_side_with_t5_3b_exact_count(zero_stage, offload, per_cpu):
    # The CSV rounds t5-3b to 2851M; T5Model t5-3b has 2,851,598,336 parameters (shared embedding 32128*1024,
    # 24 encoder blocks of 50,333,696, 24 decoder blocks of 67,111,936, 4 final norms/position biases of 1024).
    c = peers.record(n_params=2_851_598_336, n_layers=24, d_model=1024, n_heads=32, d_ff=16384, vocab=32128,
                     ffn_type="gelu", tied_embeddings=True, n_gpus=8, zero_stage=zero_stage, offload=offload)
    assert f"{peers.deepspeed_zero_estimate_host(c) / 2**30:.2f}" == per_cpu


def test_deepspeed_has_no_estimator_below_zero_2():
    c = peers.record(n_layers=2, d_model=8, n_heads=2, d_ff=32, vocab=64, n_gpus=2, zero_stage=1)
    assert peers.deepspeed_zero_estimate(c) is None and peers.deepspeed_zero_estimate_host(c) is None


def tiny_megatron(**overrides):
    fields = dict(n_layers=2, d_model=8, n_heads=2, d_ff=16, vocab=256, ffn_type="gelu", norm_type="layernorm",
                  tied_embeddings=True, tp=2, n_gpus=8, zero_stage=1, seq_len=4, micro_batch=1)
    return peers.record(**{**fields, **overrides})


def test_megatron_tiny_case_by_hand():
    # L=2 h=8 a=2 (d=4) f=16 V=256 (already a multiple of 128*t=256), LayerNorm, tied, t=2 p=1, N=8/2=4.
    # attention 2h*h*(1 + g/a)*(d*a/h) = 128*2*1 = 256; MLP 2hf = 256; norms 2h*2 = 32; final norm 16
    # TP-sharded block (256+256)*2 = 1024; replicated 32*2 + 16 = 80; embedding 8*256 = 2048
    # shard (1024/1 + 2048)/2 + 80 = 1616 params; distributed optimizer 6 + 12/4 = 9 B -> 14544
    # no SP -> without-SP path: sbh(10 + 24/2) = 32*22 = 704 per layer, x2 = 1408; + 8sbp 32 + sbhp 32 = 1472
    # p = 1: (sbV/t + sbh)*2 = (512 + 32)*2 = 1088 -> 2560; x 1.05 = 2688
    assert peers.megatron_theoretical(tiny_megatron()) == {"weight_and_optimizer": 14544, "activation": 2688,
                                                            "total": 17232}


def test_megatron_pads_the_vocabulary_to_128_t():
    assert peers.megatron_padded_vocab(tiny_megatron(vocab=50257, tp=8)) == 51200


def test_megatron_ignores_full_recompute():
    # report_theoretical_memory only branches on SP + selective; full recompute falls to the without-SP formula
    full, none = (peers.megatron_theoretical(tiny_megatron(checkpointing=k)) for k in ("full", "none"))
    assert full == none


def gpt3_175b(**overrides):
    # Korthikanti et al. 2022 Table 3: a=96 h=12288 L=96 t=8 p=8, s=2048, b=1; Megatron's padded vocab 51200
    fields = dict(n_layers=96, d_model=12288, n_heads=96, d_ff=4 * 12288, vocab=51200, ffn_type="gelu",
                  norm_type="layernorm", tied_embeddings=True, tp=8, pp=8, n_gpus=64, sp=True,
                  checkpointing="selective", seq_len=2048, micro_batch=1, grad_accum=64)
    return peers.record(**{**fields, **overrides})


def test_megatron_gpt3_sp_selective_is_34sbh_over_t_per_layer():
    s, b, h, L, t, p = 2048, 1, 12288, 96, 8, 8
    # Table 2, SP + selective: sbh*34/t per layer; the first stage holds p micro-batches of L/p layers = L layers,
    # plus the input ids 8sbp and the embedding dropout mask sbhp (all / t)
    want = Fraction(34 * s * b * h * L + 8 * s * b * p + s * b * h * p, t)
    assert peers.megatron_theoretical(gpt3_175b())["activation"] == round(want)


def test_megatron_gpt3_interleaved_adds_the_schedule_penalty():
    s, b, h, L, t, p, v = 2048, 1, 12288, 96, 8, 8, 3
    want = Fraction(34 * s * b * h * L + 8 * s * b * p + s * b * h * p, t) * (1 + Fraction(p - 1, p * v))
    got = peers.megatron_theoretical(gpt3_175b(pp_schedule="interleaved", vpp=v))["activation"]
    assert abs(got - want) <= 1  # float arithmetic in the tool, as in ours


def test_megatron_1f1b_discounts_fewer_microbatches_than_stages():
    full, half = (peers.megatron_theoretical(gpt3_175b(grad_accum=m))["activation"] for m in (8, 4))
    assert abs(half - full / 2) < 1e-6 * full + 1  # x min(1, m/p)


def tiny_llm_analysis(**overrides):
    fields = dict(n_layers=2, d_model=8, n_heads=2, n_kv_heads=2, d_ff=32, vocab=64, n_gpus=1, seq_len=4,
                  micro_batch=1, precision="amp_bf16", optimizer="adamw", attention="flash", checkpointing="none")
    return peers.record(**{**fields, **overrides})


def test_llm_analysis_tiny_case_by_hand():
    # L=2 h=8 a=2 g=2 f=32 (expansion 4) V=64, t=p=N=1, w16a16e16, Adam: master 4 + states 8, s=4 b=1 (sbh=32)
    # params per layer: attention 2h^2 + 2h*h*g/a = 128 + 128 = 256; MLP 2hf = 512; norms 2h = 16 -> 784
    # weight   2 * (784*2 + 64*8 + 8)  = 2 * 2088 = 4176   (embedding V*h = 512, final norm h = 8)
    # gradient 4 * 2088 = 8352;  optimizer 12 * 2088 = 25056
    # attention (NONE, flash): compute (2sbh + 4asb)*2 = (64 + 32)*2 = 192; (sbh + 4sbh)*2 = 320; dropout mask 32
    #           -> 544; MLP 2*sbh + (2 + 2)*4*sbh = 64 + 512 = 576; two fp32 layernorms 2*32*4 = 256
    # per layer 1376, x L=2 2752; logits V*s*b*2 = 512; final layernorm 32*4 = 128 -> activation 3392
    got = peers.llm_analysis(tiny_llm_analysis())
    assert got == {"weight": 4176, "gradient": 8352, "optimizer_state": 25056, "activation": 3392,
                   "activation_logits": 512, "total": 40976}


def test_llm_analysis_full_recompute_keeps_the_layer_input():
    # FULL: sbh * 2 / t per layer = 64, x2 = 128; + logits 512 + final layernorm 128
    assert peers.llm_analysis(tiny_llm_analysis(checkpointing="full"))["activation"] == 768


def test_llm_analysis_zero3_shards_weights_over_dp():
    one = peers.llm_analysis(tiny_llm_analysis())
    four = peers.llm_analysis(tiny_llm_analysis(n_gpus=4, zero_stage=3))
    assert (four["weight"], four["gradient"], four["optimizer_state"]) == (1044, 2088, 6264)
    assert four["activation"] == one["activation"]


def test_doc_table_builds():
    from engine.checks.peers.table import DOC_CASES, table

    text = table(with_memsim=False)
    assert text.count("\n") == 2 + 4 * len(DOC_CASES) - 1
