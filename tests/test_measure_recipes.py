"""The recipe knobs in the measurement harness: each runs the real code path, fake equals real CPU, the numbers
follow the mechanism, and the committed recipe set reproduces."""

import os

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("quiet_harness")]  # the torch tier: real PyTorch code
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from engine.checks.measure import breakdown, measure_case
from engine.checks.measure.case import resolve
from engine.checks.measure.measure import versions
from engine.checks.measure.reference_recipes import (
    HOST_COLUMN,
    RECIPE_SET_COLUMNS,
    measure_recipe_case,
    recipe_cases,
)
from engine.checks.measure.reference_set import MEASURED_COLUMNS
from engine.checks.measure.single_gpu import MEASURED_STEP, run_logged
from engine.errors import UserError
from tests.measure_helpers import assert_refused, assert_same_measured, committed_rows, skip_unless_made_with
from tests.measure_helpers import quiet_harness  # noqa: F401 (the fixture)

TINY_LLAMA = dict(model="tiny-llama", n_layers=4, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, vocab=256,
                  ffn_type="swiglu", tied_embeddings=False, seq_len=32, micro_batch=2, precision="fp32",
                  optimizer="adamw", attention="eager")
KNOBS = {
    "selective_op": {"checkpointing": "selective_op"},
    "checkpoint_every": {"checkpointing": "full", "checkpoint_every": 2},
    "loss_chunked": {"loss_impl": "chunked", "loss_chunks": 4},
    "loss_fused_linear": {"loss_impl": "fused_linear"},
    "fused": {"optimizer_impl": "fused"},
    "forloop": {"optimizer_impl": "forloop"},
    "optimizer_in_backward": {"optimizer_in_backward": True},
    "zero_grad": {"zero_grad": "zeros"},
    "activation_offload": {"checkpointing": "full", "activation_offload": True},
}
TOKENS = 2 * 32


def _saved_block(case: dict, block: int = 0) -> dict:
    """(module, op, dtype) -> bytes saved for backward by ``block`` in the measured step."""
    lb, roles, _ = run_logged(resolve(case), "fake")
    return dict(breakdown.per_layer(breakdown.saved_for_backward(lb, roles, MEASURED_STEP)).get(block, {}))


@pytest.mark.slow
@pytest.mark.parametrize("knob", [*KNOBS, "fp8"])
def test_fake_equals_real_cpu_to_the_byte(knob):
    if knob == "fp8":
        pytest.importorskip("torchao.float8")
    case = {**TINY_LLAMA, "precision": "bf16", **KNOBS.get(knob, {"precision": "fp8"})}
    fake, real = measure_case(case, "cpu-fake"), measure_case(case, "cpu")
    for k in MEASURED_COLUMNS:
        if k.startswith("measured_"):
            assert fake[k] == real[k], k


def test_selective_op_saves_odd_matmuls_and_attention():
    # 7 mm per Llama block in call order: q k v o gate up down; the odd ones are saved (q, v, gate, down), the
    # even ones (k, o, up) recomputed, plus sdpa's output; in fp32 eager attention: the two bmm of the scores
    # (bmm is in the save set and not counted). b=2, s=32, h=64, kv width 32, f=128, 4 heads.
    saved = _saved_block({**TINY_LLAMA, "checkpointing": "selective_op"}, 1)
    mm = {m: n for (m, op, _), n in saved.items() if op == "mm"}
    assert mm == {"self_attn.q_proj": TOKENS * 64 * 4, "self_attn.v_proj": TOKENS * 32 * 4,
                  "mlp.gate_proj": TOKENS * 128 * 4, "mlp.down_proj": TOKENS * 64 * 4}
    bmm = sum(n for (_, op, _), n in saved.items() if op == "bmm")
    assert bmm == 2 * 4 * 32 * 32 * 4 + TOKENS * 64 * 4  # scores q k^T (b a s s) and attn @ v (b a s d)


def test_checkpoint_every_checkpoints_the_last_block_of_each_group():
    # torchtitan: blocks i with (i + 1) % n == 0; with L = 4, n = 2 blocks 1 and 3 keep only their input.
    case = {**TINY_LLAMA, "checkpointing": "full", "checkpoint_every": 2}
    lb, roles, _ = run_logged(resolve(case), "fake")
    per = breakdown.per_layer(breakdown.saved_for_backward(lb, roles, MEASURED_STEP))
    sizes = [sum(per.get(i, {}).values()) for i in range(4)]
    assert sizes[0] > sizes[1] and sizes[2] > sizes[3] and sizes[1] == sizes[3] == TOKENS * 64 * 4


def test_chunked_loss_equals_standard_loss_and_upcasts_one_chunk_at_a_time():
    from engine.checks.measure import loss_chunked
    from engine.checks.measure.train import shifted_labels

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False).to(torch.bfloat16)
    h, ids = torch.randn(2, 12, 16, dtype=torch.bfloat16), torch.randint(0, 50, (2, 12))
    labels = shifted_labels(ids)
    want = torch.nn.functional.cross_entropy(head(h).float().view(-1, 50), labels.view(-1))
    assert torch.allclose(loss_chunked.loss(h, head, labels, 4), want, rtol=1e-5)
    # measured: the largest fp32 logits copy is one chunk, s*b*V*4/n bytes (V = 256, n = 4)
    lb, _, _ = run_logged(resolve({**TINY_LLAMA, "precision": "bf16", "loss_impl": "chunked", "loss_chunks": 4}))
    ups = [r.nbytes for r in lb.records if r.op == "_to_copy" and r.dtype == "float32" and r.shape[-1] == 256]
    assert max(ups) == TOKENS * 256 * 4 // 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_linear_loss_matches_linear_then_cross_entropy(dtype):
    from engine.checks.measure import loss_fused_linear

    torch.manual_seed(0)
    x = torch.randn(2, 40, 32, dtype=dtype, requires_grad=True)  # BT = 80, H = 32, V = 100: 4 chunks of 32
    w = torch.randn(100, 32, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, 100, (2, 40))
    labels[0, :5] = -100
    assert loss_fused_linear.chunking(80, 32, 100) == (32, 3)
    got = loss_fused_linear.loss(x, w, labels)
    got.backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    want = torch.nn.functional.cross_entropy((x @ w.t()).float().view(-1, 100), labels.view(-1))
    want.backward()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(got.float(), want, rtol=tol)
    assert torch.allclose(gx.float(), x.grad.float(), atol=tol) and torch.allclose(gw.float(), w.grad.float(), atol=tol)


def test_fused_linear_never_materializes_whole_logits():
    # V = 256, H = 64, BT = 64: chunk = next_pow2(ceil(64 / ceil(256/64))) = 16 tokens, so the only
    # vocabulary-wide tensor is one persistent 16 x 256 buffer (bf16: mm out=); the head's weight gradient
    # (V x H) is made in the forward.
    lb, _, _ = run_logged(resolve({**TINY_LLAMA, "precision": "bf16", "loss_impl": "fused_linear"}))
    forward = [r for r in lb.records if r.phase == "forward" and r.step == MEASURED_STEP]
    assert {r.shape for r in forward if r.shape and r.shape[-1] == 256} == {(16, 256)}
    assert [r.nbytes for r in forward if r.shape == (256, 64)] == [256 * 64 * 2]


def test_optimizer_in_backward_steps_like_a_normal_step():
    from engine.checks.measure.build import build_model
    from engine.checks.measure.recipe_optim import configure
    from engine.checks.measure.train import make_optimizer

    c = resolve(TINY_LLAMA)
    out = []
    for in_bwd in (False, True):
        torch.manual_seed(0)
        model = build_model(c)
        opt = make_optimizer("adamw", list(model.parameters()))
        configure(opt, {**c, "optimizer_in_backward": in_bwd})
        ids = torch.randint(0, 256, (2, 32))
        model(input_ids=ids, labels=ids).loss.backward()
        assert all(p.grad is None for p in model.parameters()) == in_bwd
        if not in_bwd:
            opt.step()
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(out[0], out[1], atol=1e-6)


@pytest.mark.slow
def test_fused_adamw_keeps_step_counters_on_the_device():
    foreach = measure_case(TINY_LLAMA, "fake")
    fused = measure_case({**TINY_LLAMA, "optimizer_impl": "fused"}, "fake")
    n_tensors = 4 * 9 + 3  # per block: 7 linears + 2 norms; embedding, final norm, head: 39
    assert foreach["measured_optimizer_bytes"] == 2 * foreach["measured_n_params"] * 4  # exp_avg, exp_avg_sq
    assert fused["measured_optimizer_bytes"] - foreach["measured_optimizer_bytes"] == 4 * n_tensors


def test_zero_grad_zeros_keeps_every_gradient_through_the_forward():
    row = measure_case({**TINY_LLAMA, "zero_grad": "zeros"}, "fake")
    assert row["measured_grad_bytes"] == row["measured_n_params"] * 4


@pytest.mark.slow
def test_activation_offload_moves_checkpoint_inputs_to_host():
    # full checkpointing keeps each block's input (b s h fp32 = 16,384 B); offloaded, it lives on the host.
    # Without offloading the host holds only AdamW's 39 fp32 step counters.
    base = measure_recipe_case({**TINY_LLAMA, "checkpointing": "full"})
    off = measure_recipe_case({**TINY_LLAMA, "checkpointing": "full", "activation_offload": True})
    assert base[HOST_COLUMN] == 4 * 39 and off[HOST_COLUMN] >= 4 * 39 + 4 * TOKENS * 64 * 4
    assert off["measured_saved_activation_bytes"] < base["measured_saved_activation_bytes"]


def test_activation_offload_leaves_the_gradients_unchanged():
    from engine.checks.measure.build import build_model
    from engine.checks.measure.recipe_offload import apply

    c = resolve({**TINY_LLAMA, "checkpointing": "full"})
    grads = []
    for offload in (False, True):
        torch.manual_seed(0)
        model = build_model(c)
        if offload:
            apply(model)
        ids = torch.randint(0, 256, (2, 32))
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.equal(grads[0], grads[1])


def test_fp8_keeps_the_saved_set_and_drops_the_autocast_weight_copies():
    # torchao's Float8Linear saves its bf16 input and the fp32 weight itself (ctx.save_for_backward(input_hp,
    # weight_hp_t)); its fp8 casts are transient. amp_bf16 instead keeps the autocast cache's bf16 copy of every
    # linear weight for backward: 4 blocks x (64*64 + 2*32*64 + 64*64 + 3*128*64) + head 256*64 = 163,840
    # elements x 2 B = 327,680 B; under fp8 only the (unconverted) head's 32,768 B.
    pytest.importorskip("torchao.float8")
    casts = {}
    for precision in ("amp_bf16", "fp8"):
        lb, roles, _ = run_logged(resolve({**TINY_LLAMA, "precision": precision}), "fake")
        start = lb.marks[f"backward{MEASURED_STEP}.0"]
        casts[precision] = sum(r.nbytes for r in breakdown.alive_at(lb, start) if id(r) in roles["weight_casts"])
        saved = sum(r.nbytes for r in breakdown.saved_for_backward(lb, roles, MEASURED_STEP))
        casts[precision + " saved"] = saved
    assert casts["amp_bf16"] == 327_680 and casts["fp8"] == 256 * 64 * 2
    assert casts["amp_bf16 saved"] == casts["fp8 saved"]


@pytest.mark.parametrize("override, word", [
    ({"compile": True}, "compile"), ({"checkpoint_every": 2}, "checkpoint_every"),
    ({"optimizer": "adafactor", "optimizer_impl": "fused"}, "optimizer_impl"),
    ({"optimizer_in_backward": True, "grad_accum": 2}, "grad_accum"),
    ({"checkpointing": "selective"}, "selective"), ({"loss_impl": "fused"}, "loss_impl"),
    ({"precision": "fp8", "ffn_type": "gelu", "n_positions": 64}, "fp8"),
])
def test_unsupported_knob_is_one_line_user_error(override, word):
    assert_refused({**TINY_LLAMA, **override}, word)


def test_recipe_set_is_complete():
    rows = committed_rows("recipes.csv")
    assert list(rows[0]) == RECIPE_SET_COLUMNS
    assert [r["case_id"] for r in rows] == [cid for cid, _, _ in recipe_cases()]
    knobs = [r["knob"] for r in rows if r["knob"] not in ("baseline", "recipe")]
    assert len(knobs) >= 50 and min(knobs.count(k) for k in set(knobs)) >= 6


def test_every_knob_case_has_its_baseline():
    rows = {r["case_id"]: r for r in committed_rows("recipes.csv")}
    for cid, knob, case in recipe_cases():
        assert cid in rows
        if knob != "baseline":
            assert any(r["knob"] == "baseline" and r["model"] == case["model"] for r in rows.values())


# The knobs whose harness paths differ most (an op policy, Liger's kernel, hooks in backward, saved-tensor hooks,
# torchao, a preset); MEMSIM_REPRODUCE_ALL=1 re-measures every knob (the suite's ten minutes hold these six).
REPRODUCED = ["selective_op", "loss_fused_linear", "optimizer_in_backward", "activation_offload", "fp8", "recipe"]
EVERY_KNOB = [*REPRODUCED, "checkpoint_every", "loss_chunked", "optimizer_impl", "zero_grad"]


@pytest.mark.slow
@pytest.mark.parametrize("knob", EVERY_KNOB if os.environ.get("MEMSIM_REPRODUCE_ALL") == "1" else REPRODUCED)
def test_committed_row_reproduces_exactly(knob):
    row = next(r for r in committed_rows("recipes.csv") if r["knob"] == knob)
    have = versions()
    if row["torchao_version"]:
        have["torchao_version"] = pytest.importorskip("torchao").__version__
    skip_unless_made_with(row, have)
    case = next(c for cid, _, c in recipe_cases() if cid == row["case_id"])
    assert_same_measured(measure_recipe_case(case), row, [*MEASURED_COLUMNS, HOST_COLUMN])


@pytest.mark.slow
def test_compiled_selective_op_block_saves_what_the_model_says():
    # torchtitan's op policy around a compiled block: Inductor keeps the tagged outputs backward reads (q, v, the
    # attention's output and logsumexp, gate) and drops the down projection's, which the eager policy keeps.
    from engine.checks.measure.recipe_compile import block_saved, per_token
    from engine.model.levels import rank_terms
    from engine.model.stage import layer_activation_bytes
    from tests.support import config

    dims = {**TINY_LLAMA, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 192, "precision": "bf16",
            "attention": "flash", "checkpointing": "selective_op"}
    rows, tokens = block_saved(dims, 32)
    assert sorted(shape[-1] for name, shape, _, _ in rows if name.startswith("mm")) == [32, 64, 192]  # v, q, gate
    slope, _ = per_token(block_saved, dims, 32)
    c = config(**{**{k: v for k, v in dims.items() if k != "model"}, "compile": True, "micro_batch": 1})
    assert slope * 32 == layer_activation_bytes(c, rank_terms(c), False)


@pytest.mark.slow
def test_compiled_loss_saves_half_precision_logits_not_fp32_log_probs():
    # Inductor's partition of lm_head + transformers' loss keeps the bf16 logits (2V per token) and two fp32
    # scalars per token (max, log-sum-exp); eager keeps the fp32 log-softmax (4V per token).
    from engine.checks.measure.recipe_compile import head_loss_saved, per_token

    case = {**TINY_LLAMA, "precision": "bf16", "attention": "flash"}
    rows, tokens = head_loss_saved(case, 32)
    wide = [(dtype, n) for _, shape, dtype, n in rows if shape and shape[-1] == 256]
    assert wide == [("bfloat16", tokens * 256 * 2)]
    slope, fixed = per_token(head_loss_saved, case, 32)
    assert slope == 2 * 256 + 2 * 64 + 4 + 4 + 8 and fixed < 64  # logits, input h, max, lse, shifted labels


@pytest.mark.slow
def test_compiled_blocks_run_as_torchtitan_compiles_them_where_no_fake_tensor_can():
    # compile = true is refused on fake tensors and accepted for a GPU (measure.resolve_for), where the blocks are
    # wrapped and compiled as torchtitan does (cuda_run.compiled_blocks): the same code runs here on real CPU
    # tensors, each block an OptimizedModule around the op policy's checkpoint, with no graph break (fullgraph).
    from engine.checks.measure.cuda_run import compiled_blocks
    from engine.checks.measure.measure import resolve_for
    from engine.checks.measure.recipe_compile import hub_kernel_hooks_removed
    from engine.checks.measure.single_gpu import prepare
    from engine.checks.measure.tracker import LiveBytes
    from engine.checks.measure.train import train_step

    case = {**TINY_LLAMA, "n_layers": 2, "checkpointing": "selective_op", "compile": True, "compile_loss": False}
    with pytest.raises(UserError, match="compile=true cannot be measured here"):
        resolve_for(case, "fake")
    c = resolve_for(case, "cuda")
    assert c["compile"] and c["checkpointing"] == "selective_op"
    model, opt = prepare({**c, "checkpointing": "none"}, "cpu")
    compiled_blocks(model, c["checkpointing"])
    wrapped = [m for m in model.modules() if type(m).__name__ == "OptimizedModule"]
    assert len(wrapped) == 2 and all(type(m._orig_mod).__name__ == "CheckpointWrapper" for m in wrapped)
    with hub_kernel_hooks_removed(model):
        train_step(model, opt, c, LiveBytes(), "cpu")
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
