"""A frozen base quantized by bitsandbytes (QLoRA: ``base_quant = nf4 | nf4_nodq``), run under fake tensors.

Built as transformers' bitsandbytes integration builds it (transformers 5.24 integrations/bitsandbytes.py
``replace_with_bnb_linear``, quantizers/quantizer_bnb_4bit.py): every ``nn.Linear`` of the decoder blocks becomes
``bnb.nn.Linear4bit(quant_type='nf4', compress_statistics=<double quantization>, compute_dtype=<the 16-bit
dtype: the model's, or autocast's under amp_*, as recipes set bnb_4bit_compute_dtype>)``; the LM head stays in
16 bits (``modules_to_not_convert``: the output embedding); each weight is quantized from its load dtype by ``bnb.functional.quantize_4bit`` (blocksize 64). peft then wraps each adapted
layer in ``peft.tuners.lora.bnb.Linear4bit`` (its dispatch reads ``model.is_loaded_in_4bit``).

bitsandbytes 0.50 registers its ops with ``torch.library`` and gives each a fake kernel (bitsandbytes/_ops.py:
``quantize_4bit``, ``dequantize_4bit``, ``gemm_4bit``, ``dequantize_blockwise``), so its own Python code runs on
fake tensors. One thing cannot: ``Params4bit`` is made by ``Tensor._make_subclass``, which refuses a FakeTensor;
the quantized weight is therefore a fake parameter of the packed storage with ``quant_state`` attached, which is
all ``Linear4bit.forward`` reads (``fix_4bit_weight_quant_state_from_module`` returns at once when the weight has
a ``quant_state``). The quantization statistics (absmax, and with double quantization the 8-bit absmax, their
fp32 absmax, code and offset) are registered as non-persistent buffers, so the tracker counts them as weights.

What a CUDA device does that the fake kernels do not (``lora_semantics``):

- ``bitsandbytes::gemm_4bit`` (backends/cuda/ops.py) runs a fused kernel for a few rows and otherwise
  ``_dequant_linear_fallback``: the weight dequantized into a buffer of the input's dtype (with double
  quantization the absmax first, two fp32 buffers of one per 64 weights), then ``F.linear``. The fake kernel only
  makes the output; the harness runs the fallback's ops for M > 512 rows (``_gemm_4bit_use_custom_cuda``: "custom
  wins up to M=512" for weights of 4M elements or more on sm80-sm120; every training matmul here is past it).
- ``quant_saves_input``: before 0.43.2 (bitsandbytes #1270, commit 9e753741, 2024-07-16) ``MatMul4Bit.forward``
  kept ``ctx.tensors = (A, B)``, so every quantized linear's input stayed alive on its autograd node until the
  graph was freed, although the backward never reads it; 0.50 keeps ``(None, B)``. The harness runs 0.50's
  ``MatMul4Bit`` with that one attribute set as before, and (0.42 had no fused kernel for training) always the
  dequantize-then-linear path.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.errors import UserError

QUANTIZED = ("nf4", "nf4_nodq")  # base_quant values the harness runs
BLOCKSIZE = 64  # transformers' BitsAndBytesConfig and bitsandbytes' Params4bit default
CUSTOM_MAX_M = 512  # bitsandbytes 0.50 backends/cuda/ops.py: above it the dequant + F.linear fallback
STATE_BUFFERS = ("absmax", "code", "state2_absmax", "state2_code", "offset")


def check(c: dict) -> None:
    """UserError (one line) for a quantized base the harness cannot run."""
    if c["base_quant"] == "none":
        if c["quant_saves_input"] or c["quant_lm_head"]:
            knob = "quant_saves_input" if c["quant_saves_input"] else "quant_lm_head"
            raise UserError(f"{knob} needs a quantized base (base_quant nf4 or nf4_nodq)")
        return
    if c["base_quant"] not in QUANTIZED:
        raise UserError(f"base_quant={c['base_quant']!r} cannot be measured here; accepted: none, "
                        f"{', '.join(QUANTIZED)} (bitsandbytes Linear4bit)")
    q = f"base_quant={c['base_quant']!r}"
    if c["lora_rank"] < 1:
        raise UserError(f"{q} is measured under LoRA (lora_rank > 0): quantized weights cannot train")
    if c["ffn_type"] != "swiglu" or c["norm_type"] != "rmsnorm" or c.get("n_experts", 0):
        raise UserError(f"{q} is measured on dense Llama-style models (swiglu + rmsnorm)")
    if c["precision"] not in ("bf16", "fp16", "amp_bf16", "amp_fp16"):
        raise UserError(f"{q} with precision={c['precision']!r}: a quantized base computes in 16 bits (bf16, fp16, amp_*)")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise UserError("measuring a quantized base needs bitsandbytes (pip install bitsandbytes)") from None


def from_fp16(c: dict) -> bool:
    """Whether the base is quantized from fp16 (``quantize``): bitsandbytes before 0.43 (``quant_saves_input``
    stands for that era) and Lightning's plugin (``quant_lm_head``); memsim's temporaries.dequant_bytes."""
    return c["quant_saves_input"] or c["quant_lm_head"]


def double_quant(c: dict) -> bool:
    """``nf4``: NF4 with double quantization (QLoRA arXiv:2305.14314 sec. 3); ``nf4_nodq``: without."""
    return c["base_quant"] == "nf4"


def replace_linears(model: torch.nn.Module, blocks: list[torch.nn.Module], c: dict, dtype: torch.dtype) -> None:
    """Swap each ``nn.Linear`` of the decoder ``blocks`` for a ``bnb.nn.Linear4bit`` (on the meta device), as
    ``replace_with_bnb_linear`` does; the head and embeddings stay. ``quant_storage`` is the model's dtype under
    FSDP (every parameter of a sharded group one dtype, as Answer.AI's fsdp_qlora and transformers'
    ``bnb_4bit_quant_storage`` set it), else uint8."""
    import bitsandbytes as bnb

    storage = dtype if c["zero_stage"] > 0 or c["framework"] == "fsdp" else torch.uint8
    compute = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(c["precision"], dtype)
    for block in blocks:
        for parent in list(block.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    with torch.device("meta"):
                        q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                              compute_dtype=compute, compress_statistics=double_quant(c),
                                              quant_type="nf4", quant_storage=storage)
                    q.weight_double_quant = double_quant(c)  # Params4bit's flag does not survive materialization
                    setattr(parent, name, q)
    head = model.get_output_embeddings()
    if c["quant_lm_head"] and not c["tied_embeddings"] and type(head) is torch.nn.Linear:
        # Lightning's BitsandbytesPrecision converts every nn.Linear, the head included (_convert_layers)
        with torch.device("meta"):
            q = bnb.nn.Linear4bit(head.in_features, head.out_features, bias=head.bias is not None,
                                  compute_dtype=compute, compress_statistics=double_quant(c), quant_type="nf4",
                                  quant_storage=storage)
        q.weight_double_quant = double_quant(c)
        model.set_output_embeddings(q)
    model.is_loaded_in_4bit = True  # what peft's dispatch_bnb_4bit reads (transformers sets it on load)


def quantize(model: torch.nn.Module, from_fp16: bool = False) -> None:
    """Inside the fake mode, after materialization: each Linear4bit's 16-bit weight quantized as
    ``Params4bit._quantize`` does, the packed weight and its statistics put in place of it. ``from_fp16``: the
    weight cast to fp16 first, so the quant state's dtype (what dequantization returns) is fp16, as bitsandbytes
    before 0.43 (``Params4bit.cuda``: ``self.data.contiguous().half()``) and Lightning's plugin
    (``_Linear4bit._quantize_weight``) quantize."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    # double quantization's 256-entry dynamic map: bitsandbytes computes it once from data and caches it
    # (functional.name2qmap); a fake stand-in of its size for this mode, the cache restored after
    cached = F.name2qmap.pop("dynamic", None)
    F.name2qmap["dynamic"] = torch.empty(256, dtype=torch.float32)
    try:
        _quantize_all(model, bnb, from_fp16)
    finally:
        F.name2qmap.pop("dynamic")
        if cached is not None:
            F.name2qmap["dynamic"] = cached


def _quantize_all(model: torch.nn.Module, bnb, from_fp16: bool) -> None:
    for m in model.modules():
        if not isinstance(m, bnb.nn.Linear4bit) or getattr(m.weight, "quant_state", None) is not None:
            continue
        w = m.weight.half() if from_fp16 else m.weight
        packed, state = bnb.functional.quantize_4bit(w.detach(), blocksize=BLOCKSIZE, compress_statistics=
                                                     m.weight_double_quant, quant_type="nf4",
                                                     quant_storage=m.quant_storage)
        p = torch.nn.Parameter(packed, requires_grad=False)
        p.quant_state = state
        m._parameters["weight"] = p
        m.quant_state = state
        _register_state(m, state)


def _register_state(m: torch.nn.Module, state) -> None:
    """The quantization statistics as non-persistent buffers (weights to the tracker)."""
    tensors = {"absmax": state.absmax, "code": state.code}
    if state.nested:
        tensors |= {"state2_absmax": state.state2.absmax, "state2_code": state.state2.code, "offset": state.offset}
    for name, t in tensors.items():
        m.register_buffer(name, t, persistent=False)


class _CudaGemm4bit(TorchDispatchMode):
    """``bitsandbytes::gemm_4bit`` as the CUDA backend runs it past ``CUSTOM_MAX_M`` rows (always, for the
    0.42-era path): the dequantized weight in the input's dtype, then ``F.linear`` (``_dequant_linear_fallback``)."""

    def __init__(self, always: bool, state_dtype=None) -> None:
        super().__init__()
        self.always, self.state_dtype = always, state_dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.ops.bitsandbytes.gemm_4bit.default:
            return func(*args, **kwargs)
        a, b, shape, absmax, blocksize, quant_type = args[:6]
        bias = args[6] if len(args) > 6 else kwargs.get("bias")
        rows = a.numel() // a.shape[-1]
        if rows <= CUSTOM_MAX_M and not self.always:
            return func(*args, **kwargs)
        absmax_8bit = kwargs.get("absmax_8bit", args[7] if len(args) > 7 else None)
        if absmax_8bit is not None:  # nested: absmax_code[absmax_8bit] * absmax + offset, in fp32
            code = kwargs.get("absmax_code", args[8] if len(args) > 8 else None)
            offset = kwargs.get("absmax_offset", args[9] if len(args) > 9 else None)
            absmax = torch.ops.bitsandbytes.dequantize_blockwise.default(absmax_8bit, absmax, code, 256,
                                                                          torch.float32) + offset
        # 0.42's MatMul4Bit: F.dequantize_4bit(B, quant_state).to(A.dtype): the quant state's dtype, then a cast
        weight = torch.ops.bitsandbytes.dequantize_4bit.default(b, absmax, blocksize, quant_type, shape,
                                                                self.state_dtype or a.dtype).to(a.dtype)
        return torch.nn.functional.linear(a, weight, bias)


def autocast_query_is_cuda(c: dict) -> bool:
    """Whether the case's LoRA layers get CUDA's answer to ``torch.is_autocast_enabled()`` (see ``lora_semantics``):
    every LoRA case of a path this module opened (a quantized base, LoRA dropout, held outputs, several GPUs); the
    plain one-GPU LoRA rows of cpu_fake.csv and recipes.csv were measured with the CPU's answer and keep it."""
    from engine.checks.measure.parallel import needs_world

    return c["lora_rank"] > 0 and (c["base_quant"] != "none" or c["lora_dropout"] > 0 or c["outputs_held"]
                                   or needs_world(c))


@contextmanager
def lora_semantics(c: dict):
    """Around the training steps, entered after (above) the tracker.

    peft decides whether to cast an adapter's input to the adapter's fp32 dtype by ``not
    torch.is_autocast_enabled()`` (lora/layer.py, lora/bnb.py), which without an argument asks about CUDA's
    autocast; the harness autocasts on the CPU key with CUDA's policy (cuda_semantics.py), so the question is
    answered with the CPU autocast's state, as a CUDA run answers it (recipe_fp8.py does the same for torchao).
    Without this, an adapter under autocast casts a 16-bit input to fp32 and autocast casts it back: a second
    16-bit copy where CUDA shares the input. Then, for a quantized base: CUDA's gemm_4bit choice, and with
    ``quant_saves_input`` the pre-0.43.2 ``MatMul4Bit`` that keeps its input.
    """
    with _autocast_query(autocast_query_is_cuda(c)), _bnb_semantics(c):
        yield


@contextmanager
def _autocast_query(active: bool):
    if not active:
        yield
        return
    original = torch.is_autocast_enabled
    torch.is_autocast_enabled = lambda device_type=None: original("cpu" if device_type is None else device_type)
    try:
        yield
    finally:
        torch.is_autocast_enabled = original


@contextmanager
def _bnb_semantics(c: dict):
    if c["base_quant"] == "none":
        yield
        return
    import bitsandbytes.autograd._functions as bnb_autograd
    import bitsandbytes.nn.modules as bnb_modules

    original, fix = bnb_autograd.MatMul4Bit, bnb_modules.fix_4bit_weight_quant_state_from_module
    if c["quant_saves_input"]:
        bnb_autograd.MatMul4Bit = _keeps_input(original)
    bnb_modules.fix_4bit_weight_quant_state_from_module = _state_onto_weight
    try:
        with _CudaGemm4bit(always=c["quant_saves_input"], state_dtype=torch.float16 if from_fp16(c) else None):
            yield
    finally:
        bnb_autograd.MatMul4Bit = original
        bnb_modules.fix_4bit_weight_quant_state_from_module = fix


def _state_onto_weight(module) -> None:
    """bitsandbytes' ``fix_4bit_weight_quant_state_from_module``: the quant state put back on a weight that lost it
    (FSDP's gathered parameter, "this happens for example for fsdp"), as an attribute of the tensor FSDP gathered
    into rather than a new ``Params4bit`` (which would replace FSDP's unsharded parameter, and cannot wrap a fake)."""
    if getattr(module.weight, "quant_state", None) is None:
        module.weight.quant_state = module.quant_state


def _keeps_input(base):
    """bitsandbytes' ``MatMul4Bit`` with ``ctx.tensors = (A, B)`` as before 0.43.2 (0.42.0
    bitsandbytes/autograd/_functions.py line 523); the backward still reads B only."""

    class MatMul4BitKeepsInput(base):
        @staticmethod
        def forward(ctx, A, B, out=None, bias=None, quant_state=None):
            output = base.forward(ctx, A, B, out, bias, quant_state)
            if any(ctx.needs_input_grad[:2]):
                ctx.tensors = (A, ctx.tensors[1])
            return output

    return MatMul4BitKeepsInput
