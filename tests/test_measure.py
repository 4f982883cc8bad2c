"""The measurement harness: tracker by hand, fake = real CPU, the committed reference set reproduces."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from engine.checks.measure import measure_case  # noqa: E402
from engine.checks.measure.autocast_policy import POLICY  # noqa: E402
from engine.checks.measure.measure import versions  # noqa: E402
from engine.checks.measure.reference_set import COLUMNS, MEASURED_COLUMNS  # noqa: E402
from engine.checks.measure.tracker import LiveBytes, rounded_bytes  # noqa: E402
from tests.measure_helpers import assert_refused, assert_same_measured, committed_rows, skip_unless_made_with  # noqa: E402
from tests.measure_helpers import quiet_harness  # noqa: E402, F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quiet_harness")]  # beyond the fast core tier

TINY_GPT2 = dict(model="tiny-gpt2", n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab=128, ffn_type="gelu",
                 tied_embeddings=True, n_positions=64, seq_len=32, micro_batch=2, precision="fp32",
                 optimizer="sgd", attention="eager", dropout=0.0)


def test_tracker_counts_a_linear_step_by_hand():
    # x (8, 16) fp32 = 512 B; W (4, 16) = 256 B; y = x @ W.T (8, 4) = 128 B; loss = y.sum() = 4 B.
    # Forward peak: x + W + y + loss = 900 B. sum() keeps no input and mm keeps x and W, so y dies
    # with the forward. Backward: ones_like(loss) 4 B, grad of y = an expand (a view, 0 B),
    # grad W = (4, 16) = 256 B. Peak = x + W + loss + ones + gradW = 512 + 256 + 4 + 4 + 256 = 1032 B.
    x, w = torch.ones(8, 16), torch.ones(4, 16, requires_grad=True)
    with LiveBytes() as lb:
        lb.track(x)
        lb.track(w)
        loss = (x @ w.T).sum()
        loss.backward()
    assert lb.live_bytes() == 512 + 256 + 4 + 256  # y and ones_like freed: x, W, loss, W.grad
    from engine.checks.measure.breakdown import peak

    assert peak(lb, 0, lb.clock)[0] == 1032
    assert rounded_bytes(4) == 512 and rounded_bytes(1024) == 1024 and rounded_bytes(1025) == 1536


def test_tiny_gpt2_weights_by_hand():
    # wte 128*64 + wpe 64*64 = 12,288; per block: ln 2*2*64 = 256, c_attn 64*192+192 = 12,480,
    # attn c_proj 64*64+64 = 4,160, c_fc 64*256+256 = 16,640, mlp c_proj 256*64+64 = 16,448
    # -> 49,984 per block; ln_f 128; tied head. 12,288 + 2*49,984 + 128 = 112,384 params, 4 B each.
    row = measure_case(TINY_GPT2, "fake")
    assert row["measured_n_params"] == 112_384
    assert row["measured_weight_bytes"] == 112_384 * 4
    assert row["measured_optimizer_bytes"] == 0  # plain SGD keeps no state


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp_bf16"])
def test_fake_equals_real_cpu_to_the_byte(precision):
    case = {**TINY_GPT2, "precision": precision, "optimizer": "adamw", "dropout": 0.1}
    fake, real = measure_case(case, "cpu-fake"), measure_case(case, "cpu")
    for k in MEASURED_COLUMNS:
        if k.startswith("measured_"):
            assert fake[k] == real[k], k


def test_cuda_semantics_change_only_what_cuda_does_differently():
    # CUDA's fused dropout keeps a 1-byte mask where CPU keeps a mask of the input dtype (4 B in fp32).
    case = {**TINY_GPT2, "dropout": 0.1}
    cpu, cuda = measure_case(case, "cpu-fake"), measure_case(case, "fake")
    assert cuda["measured_saved_activation_bytes"] < cpu["measured_saved_activation_bytes"]
    assert cuda["measured_weight_bytes"] == cpu["measured_weight_bytes"]


def test_autocast_policy_names_match_this_build():
    registered = {q[6:] for q in torch._C._dispatch_get_all_op_names()
                  if q.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(q, "AutocastCUDA")}
    assert set(POLICY) - {"binary_cross_entropy"} <= registered | {"cudnn_convolution", "cudnn_convolution_transpose"}
    assert registered - set(POLICY) == set()


def test_reference_set_is_complete():
    rows = committed_rows("cpu_fake.csv")
    assert len(rows) >= 60
    assert list(rows[0]) == COLUMNS
    assert len({r["case_id"] for r in rows}) == len(rows)


@pytest.mark.parametrize("case_id", ["gpt2-124m_amp_bf16_adam_eager_s256_b8",
                                     "llama-3.2-1b-like_bf16_adamw_flash_s2048_b2_lora8-qv"])
def test_committed_row_reproduces_exactly(case_id):
    row = next(r for r in committed_rows("cpu_fake.csv") if r["case_id"] == case_id)
    skip_unless_made_with(row, versions())
    case = {k: v for k, v in row.items() if k not in MEASURED_COLUMNS and k != "case_id"}
    assert_same_measured(measure_case(case, "fake"), row, MEASURED_COLUMNS)


@pytest.mark.parametrize("override, word", [
    ({"tp": 2}, "tp=2"), ({"zero_stage": 3}, "zero_stage"), ({"checkpointing": "selective"}, "selective"),
    ({"precision": "fp8"}, "fp8"), ({"base_quant": "nf4"}, "nf4"), ({"n_gpus": 8}, "n_gpus"),
    ({"norm_type": "rmsnorm"}, "norm_type"), ({"n_heads": 5}, "GPT-2"), ({"attention": "xformers"}, "attention"),
    ({"lm_head": False, "loss_impl": "chunked"}, "lm_head"),  # an encoder (BERT): its plain step only
    ({"lm_head": False, "ffn_type": "swiglu", "norm_type": "rmsnorm", "linear_bias": "none"}, "encoder"),
])
def test_unsupported_option_is_one_line_user_error(override, word):
    assert_refused({**TINY_GPT2, **override}, word)


def test_allocator_input_chooses_the_replayed_allocator():
    """`allocator` reaches the replay: the same logged step, replayed with and without expandable segments, has one
    allocated peak and two reserved peaks (a recomputed step whose logits dwarf its layers)."""
    tiny = dict(model="tiny", n_layers=2, d_model=256, n_heads=4, d_ff=1024, vocab=32000, ffn_type="swiglu",
                seq_len=512, micro_batch=8, precision="bf16", optimizer="adamw", checkpointing="full",
                attention="flash")
    caching, expandable = (measure_case({**tiny, "allocator": a}) for a in ("caching", "expandable"))
    assert caching["measured_allocated_peak_bytes"] == expandable["measured_allocated_peak_bytes"]
    assert caching["measured_reserved_peak_bytes"] != expandable["measured_reserved_peak_bytes"]


def test_an_encoder_is_measured_as_bert_and_memsim_counts_its_step():
    """lm_head = false builds BertForSequenceClassification (a 2-label head): HF's BERT-large rows
    (data/golden/hardware.csv hf-bert-01, -04) as the harness runs them today, in fp32 and under fp16 autocast, eager
    attention with dropout, transformers' for-loop AdamW, gradients zeroed in place: memsim's allocated peak within
    1% (+0.7%, +0.1%; the January 2022 stack of those rows kept the softmax inputs too: test_softmax_saves_input.py)."""
    from engine.cli.measure import measure_table

    bert = dict(model="bert-large-uncased", optimizer="adamw", optimizer_impl="forloop", zero_grad="zeros",
                attention="eager", dropout=0.1, seq_len=512, micro_batch=4)
    table = measure_table([{**bert, "precision": p} for p in ("fp32", "amp_fp16")], "fake").to_pylist()
    for row in table:
        measured, memsim = row["measured_allocated_peak_bytes"], row["allocated_peak_bytes"]
        assert abs(memsim - measured) / measured < 0.01, (row["precision"], memsim, measured)
