"""The configurations `memsim plan` searches, as sweep specs over the user's own configuration.

Every input the plan does not search keeps the user's value (each grid's base record is the user's resolved
configuration); each searched input is an axis, and inputs that only make sense together move as one linked axis
([link], engine/configure/spec.py), so no grid holds a combination that cannot be meant:

    layout      tp, pp, cp, ep, pp_schedule, vpp, and sp, loss_parallel with tp > 1 (the tp·pp·cp of the grid's dp)
    batch       micro_batch with grad_accum: micro_batch x grad_accum x dp = the global batch
    sharding    zero_stage with offload (an offload needs ZeRO >= 1, offloaded parameters ZeRO-3)
    recompute   checkpointing with checkpoint_every: none, selective, selective_op, full every 1, 2 or 4 layers
    loss        loss_impl with loss_chunks: standard, chunked (8 slices), fused_linear
    method      lora_rank with base_quant: the user's (--method keep), or full, LoRA r=16 and QLoRA r=16 (any)
    precision   the user's and the others of its 16-bit family, fp8 where the GPU has fp8 tensor cores
    framework   pytorch, fsdp, deepspeed, megatron (data/frameworks.toml), linked with compile: torch.compile off
                and on where the framework runs Hugging Face / PyTorch modules; under the fused kernels of Megatron
                and DeepSpeed (frameworks.toml fused_kernels) the user's value only, as memsim's compiled terms
                (compiled.py, selective_op.py) are those of Inductor's partition of PyTorch's modules
    activation_offload: off and on
    optimizer_impl fused, attention flash, allocator expandable: the lightest, and no slower than the others
                (time.py has one rate for every attention kernel and optimizer step; expandable segments reserve
                1/16 of the churn where the default allocator may keep whole segments beside it, param_blocks.py
                and overhead.py); plan.py puts the user's back where it still fits

One grid per (n_gpus, dp): with dp fixed, the (micro_batch, grad_accum) pairs that make the global batch are the
same for every layout, so the batch is a step-level axis and the kernel evaluates each layout's model states
once for all of them and every recomputation (engine/model/sweep_kernel.py). Layouts that break a rule the
kernel would flag anyway (heads over TP, layers over PP stages, a sequence that does not split over SP or CP,
experts over EP) are left out, so the search spends its time on configurations that can run. Not searched,
because another value is never heavier nor slower: the optimizer step's `foreach` and `forloop` (`fused`
allocates nothing, data/optimizers.toml), attention kernels other than flash (they keep more, at the same rate
in time.py), the GPipe schedule (1F1B's bubble, fewer micro-batches in flight); nor context parallelism below
CP_MIN_TOKENS tokens per rank (ring attention's K/V passes outgrow the attention they hide behind).
"""

from dataclasses import dataclass

from engine.catalogs.conventions import FRAMEWORK_FUSED_KERNELS
from engine.errors import UserError
from engine.inputs.codes import Framework, Precision, names
from engine.inputs.vocabulary import spell

TP = (1, 2, 4, 8)  # TP beyond one 8-GPU NVLink domain crosses the network per layer (collectives.py)
PP = (1, 2, 4, 8, 16)
CP = (1, 2, 4, 8)
CP_MIN_TOKENS = 4096  # the fewest tokens per CP rank in THROUGHPUT.md's rows: 8,192 (Llama 3, 128k over CP 16)
EP = (1, 2, 4, 8, 16, 32, 64)
MICRO_BATCHES = (1, 2, 4, 8, 16)
SCHEDULES = (("1f1b", 1), ("interleaved", 2))  # GPipe: 1F1B's bubble with all m micro-batches in flight, never lighter
SHARDING = ((0, "none"), (1, "none"), (2, "none"), (3, "none"), (1, "optimizer"), (2, "optimizer"),
            (3, "optimizer"), (3, "optimizer_params"))
RECOMPUTE = (("none", 1), ("selective", 1), ("selective_op", 1), ("full", 1), ("full", 2), ("full", 4))
FRAMEWORKS = tuple(names(Framework))  # pytorch, fsdp, deepspeed, megatron
METHODS = {"full": (0, "none"), "lora": (16, "none"), "qlora": (16, "nf4")}  # lora_rank, base_quant
LAYOUT = ["tp", "pp", "cp", "ep", "pp_schedule", "vpp", "sp", "loss_parallel"]
# inputs the plan may change, in the order its differences are said
SEARCHED = ["n_gpus", "dp", "tp", "pp", "cp", "ep", "pp_schedule", "vpp", "sp", "zero_stage", "offload",
            "checkpointing", "checkpoint_every", "micro_batch", "grad_accum", "precision", "framework", "compile",
            "optimizer_impl", "loss_impl", "loss_chunks", "loss_parallel", "attention", "activation_offload",
            "lora_rank", "base_quant", "allocator"]


@dataclass(frozen=True)
class Space:
    """One grid of a plan's search: its axes and links (a sweep spec's [axes] and [link]), at one n_gpus and dp."""

    n_gpus: int
    dp: int
    axes: dict
    links: dict


def method_of(rec) -> str:
    """full, lora or qlora: what a configuration trains."""
    if rec.lora_rank == 0:
        return "full"
    return "qlora" if spell("base_quant", rec.base_quant) == "nf4" else "lora"


def layouts(rec, n_gpus: int) -> dict[int, list[tuple]]:
    """Every (tp, pp, cp, ep, pp_schedule, vpp, sp, loss_parallel) of n_gpus that can run, by its dp."""
    heads, kv, layers = rec.n_heads, rec.n_kv_heads or rec.n_heads, rec.n_layers
    out: dict[int, list[tuple]] = {}
    for tp in TP:
        if heads and (heads % tp or kv % tp or rec.seq_len % tp):
            continue
        for pp in PP:
            if pp > 1 and pp > layers:
                continue
            for cp in CP:
                if n_gpus % (tp * pp * cp) or (cp > 1 and (rec.seq_len % (2 * cp) or rec.seq_len // cp < CP_MIN_TOKENS)):
                    continue
                dp = n_gpus // (tp * pp * cp)
                out.setdefault(dp, []).extend(layout_rows(rec, tp, pp, cp, dp))
    return out


def layout_rows(rec, tp: int, pp: int, cp: int, dp: int) -> list[tuple]:
    """The expert degrees and pipeline schedules of one (tp, pp, cp) layout."""
    experts, layers = rec.n_experts, rec.n_layers
    eps = [ep for ep in EP if experts and experts % ep == 0 and (dp * cp) % ep == 0] or [1]
    schedules = [s for s in SCHEDULES if pp * s[1] <= layers] if pp > 1 else [("1f1b", 1)]
    parallel_loss = True if tp > 1 else bool(rec.loss_parallel)
    return [(tp, pp, cp, ep, schedule, vpp, tp > 1, parallel_loss) for ep in eps for schedule, vpp in schedules]


def batches(per_replica: int) -> list[tuple[int, int]]:
    """(micro_batch, grad_accum) pairs that make `per_replica` samples per data-parallel replica."""
    return [(mb, per_replica // mb) for mb in MICRO_BATCHES if per_replica % mb == 0]


def precisions(rec) -> list[str]:
    """The user's precision and the others of its 16-bit family; fp8 where the GPU has fp8 tensor cores; fp16
    beside bf16 where the tensor cores cannot multiply bf16 (Volta, Turing: bf16 runs emulated there)."""
    user = spell("precision", rec.precision)
    family = ["amp_fp16", "fp16"] if rec.precision in (Precision.AMP_FP16, Precision.FP16) else ["amp_bf16", "bf16"]
    if rec.fp8_tensor_cores and family[0] == "amp_bf16":
        family.append("fp8")
    if not rec.bf16_tensor_cores and family[0] == "amp_bf16":
        family += ["amp_fp16", "fp16"]
    return list(dict.fromkeys([user, *family]))


def framework_compile(user_compile: bool) -> list[tuple[str, bool]]:
    """(framework, compile) pairs: compile off and on under the frameworks that run PyTorch's modules, the user's
    value under the fused-kernel ones."""
    pairs = []
    for name, code in zip(FRAMEWORKS, Framework):
        choices = [user_compile] if FRAMEWORK_FUSED_KERNELS[code] else [user_compile, not user_compile]
        pairs += [(name, compile_) for compile_ in choices]
    return pairs


def user_first(values: list, user) -> list:
    """Values with the user's own first (when it is one of them), so ties go to what the user has."""
    return sorted(dict.fromkeys(values), key=lambda v: v != user)


def shared_axes(rec, method: str) -> tuple[dict, dict]:
    """The axes and links every grid of the plan shares (all but the layout and the batch)."""
    user = {name: spell(name, rec[name]) for name in SEARCHED}
    axes, links = {}, {}
    add_link(axes, links, "sharding", ["zero_stage", "offload"],
             user_first(list(SHARDING), (user["zero_stage"], user["offload"])))
    add_link(axes, links, "recompute", ["checkpointing", "checkpoint_every"],
             user_first(list(RECOMPUTE), (user["checkpointing"], user["checkpoint_every"])))
    losses = [("standard", user["loss_chunks"]), ("chunked", 8), ("fused_linear", user["loss_chunks"])]
    add_link(axes, links, "loss", ["loss_impl", "loss_chunks"], user_first(losses, (user["loss_impl"], user["loss_chunks"])))
    methods = [(user["lora_rank"], user["base_quant"])] + ([] if method == "keep" else list(METHODS.values()))
    if len(set(methods)) > 1:
        add_link(axes, links, "method", ["lora_rank", "base_quant"], list(dict.fromkeys(methods)))
    axes["precision"] = precisions(rec)
    add_link(axes, links, "framework", ["framework", "compile"],
             user_first(framework_compile(user["compile"]), (user["framework"], user["compile"])))
    axes["optimizer_impl"] = ["fused"]
    axes["attention"] = ["flash"]
    axes["allocator"] = ["expandable"]
    axes["activation_offload"] = user_first([False, True], user["activation_offload"])
    return axes, links


def build_spaces(rec, n_gpus_options: list[int], global_batch: int, method: str) -> list[Space]:
    """The plan's grids around the user's resolved record `rec`: one per (n_gpus, dp) that runs the global batch."""
    shared, shared_links = shared_axes(rec, method)
    spaces = []
    for n_gpus in n_gpus_options:
        for dp, rows in sorted(layouts(rec, n_gpus).items()):
            pairs = batches(global_batch // dp) if global_batch % dp == 0 else []
            if not pairs:
                continue
            axes, links = {"n_gpus": [n_gpus]}, dict(shared_links)
            add_link(axes, links, "layout", LAYOUT, rows)
            add_link(axes, links, "batch", ["micro_batch", "grad_accum"], pairs)
            spaces.append(Space(n_gpus, dp, {**axes, **shared}, links))
    if not spaces:
        raise UserError(f"no layout of {' or '.join(map(str, n_gpus_options))} GPUs runs a global batch of "
                        f"{global_batch} samples (micro_batch x grad_accum x dp must make it): give --global-batch "
                        "a multiple of the data-parallel degree")
    return spaces


def add_link(axes: dict, links: dict, group: str, names: list[str], values: list[tuple]) -> None:
    """Linked axes: value j of each input named moves with value j of the others (one value: a plain axis)."""
    for k, name in enumerate(names):
        axes[name] = [v[k] for v in values]
    if len(values) > 1 and len(names) > 1:
        links[group] = list(names)
