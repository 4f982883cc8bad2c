"""The measured recipe set: each training-recipe knob of CONFIG.md beside the same case without it.

Example:
    memsim measure --set recipes -o data/measured/recipes.csv
    memsim measure --set recipes -o /tmp/sac.csv --only selective_op

Each knob case comes with its baseline (the same configuration with every recipe field at its default,
``knob = baseline``), so a model of the knob is judged on the difference as well as the total. Cases
are measured like the reference set (``measure_case`` on ``device='fake'``: FakeTensorMode with CUDA
semantics emulated); ``measured_host_peak_bytes`` adds the peak of host-resident bytes (activations
offloaded to host RAM), which the device columns leave out. See data/measured/RECIPES.md.
"""

from __future__ import annotations

from engine.checks.measure.reference_set import CONFIG_COLUMNS, MEASURED_COLUMNS, MODELS

RECIPE_COLUMNS = ["optimizer_impl", "optimizer_in_backward", "loss_impl", "loss_chunks", "checkpoint_every",
                  "activation_offload", "compile", "zero_grad", "eval_micro_batch"]
RECIPE_DEFAULTS = {"optimizer_impl": "foreach", "optimizer_in_backward": False, "loss_impl": "standard",
                   "loss_chunks": 8, "checkpoint_every": 1, "activation_offload": False, "compile": False,
                   "zero_grad": "none", "checkpointing": "none", "eval_micro_batch": 0}
HOST_COLUMN = "measured_host_peak_bytes"
RECIPE_SET_COLUMNS = ["case_id", "knob", *CONFIG_COLUMNS, *RECIPE_COLUMNS, *MEASURED_COLUMNS[:-4], HOST_COLUMN,
                      *MEASURED_COLUMNS[-4:], "torchao_version"]

CKPT = {"checkpointing": "full"}
SAC = {"checkpointing": "selective_op"}
# knob -> [(model, seq_len, micro_batch, precision, optimizer, attention, fields)]; fields hold the knob and
# any non-recipe change (checkpointing=full is part of the baseline where a knob needs it or it moves the peak)
KNOB_CASES = {
    "selective_op": [
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", SAC),
        ("gpt2-355m", 1024, 4, "bf16", "adamw", "flash", SAC),
        ("gpt2-124m", 1024, 2, "fp32", "adamw", "sdpa_math", SAC),
        ("llama-400m-like", 2048, 4, "bf16", "adamw", "flash", SAC),
        ("llama-400m-like", 2048, 2, "amp_bf16", "adamw", "flash", SAC),
        ("llama-400m-like", 1024, 2, "amp_bf16", "adamw", "eager", SAC),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", SAC),
        ("llama-3.2-1b-like", 4096, 1, "amp_bf16", "adamw", "flash", SAC),
        ("qwen2.5-0.5b-like", 2048, 2, "bf16", "adamw", "flash", SAC),
    ],
    "checkpoint_every": [
        ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 2}),
        ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 3}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 2}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 3}),
        ("llama-3.2-1b-like", 4096, 1, "amp_bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 2}),
        ("gpt2-355m", 1024, 4, "amp_bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 4}),
        ("qwen2.5-0.5b-like", 4096, 1, "bf16", "adamw", "flash", {**CKPT, "checkpoint_every": 2}),
    ],
    "loss_chunked": [
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {"loss_impl": "chunked"}),
        ("llama-3.2-1b-like", 2048, 2, "bf16", "adamw", "flash", {"loss_impl": "chunked"}),
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {"loss_impl": "chunked", "loss_chunks": 4}),
        ("llama-3.2-1b-like", 4096, 1, "bf16", "adamw", "flash", {"loss_impl": "chunked", "loss_chunks": 16}),
        ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {"loss_impl": "chunked"}),
        ("llama-3.2-1b-like", 8192, 1, "bf16", "adamw", "flash", {**CKPT, "loss_impl": "chunked"}),
        ("qwen2.5-0.5b-like", 2048, 2, "bf16", "adamw", "flash", {"loss_impl": "chunked"}),
        ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {"loss_impl": "chunked"}),
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"loss_impl": "chunked"}),
    ],
    "loss_fused_linear": [
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("llama-3.2-1b-like", 2048, 4, "bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("llama-3.2-1b-like", 4096, 2, "amp_bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("llama-3.2-1b-like", 8192, 1, "bf16", "adamw", "flash", {**CKPT, "loss_impl": "fused_linear"}),
        ("qwen2.5-0.5b-like", 2048, 2, "bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {"loss_impl": "fused_linear"}),
        ("gpt2-124m", 1024, 4, "fp32", "adamw", "eager", {"loss_impl": "fused_linear"}),
    ],
    "optimizer_impl": [
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"optimizer_impl": "fused"}),
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"optimizer_impl": "forloop"}),
        ("llama-400m-like", 2048, 1, "bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "fused"}),
        ("llama-400m-like", 2048, 1, "bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "forloop"}),
        ("tinyllama-1.1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "fused"}),
        ("tinyllama-1.1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "forloop"}),
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "fused"}),
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {**CKPT, "optimizer_impl": "forloop"}),
        ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adam", "flash", {**CKPT, "optimizer_impl": "fused"}),
        ("llama-400m-like", 2048, 1, "bf16", "sgd_momentum", "flash", {**CKPT, "optimizer_impl": "fused"}),
    ],
    "optimizer_in_backward": [
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {**CKPT, "optimizer_in_backward": True}),
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash",
         {**CKPT, "optimizer_in_backward": True, "optimizer_impl": "fused"}),
        ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {"optimizer_in_backward": True}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {**CKPT, "optimizer_in_backward": True}),
        ("qwen2.5-0.5b-like", 2048, 1, "bf16", "adamw", "flash",
         {"optimizer_in_backward": True, "optimizer_impl": "fused"}),
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"optimizer_in_backward": True}),
        ("llama-400m-like", 512, 2, "amp_bf16", "adamw", "flash", {"optimizer_in_backward": True}),
    ],
    "activation_offload": [
        ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("llama-3.2-1b-like", 4096, 1, "bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("llama-3.2-1b-like", 8192, 1, "bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("tinyllama-1.1b-like", 4096, 2, "bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("gpt2-355m", 1024, 4, "amp_bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("qwen2.5-0.5b-like", 4096, 1, "bf16", "adamw", "flash", {**CKPT, "activation_offload": True}),
        ("llama-400m-like", 2048, 2, "bf16", "adamw", "flash", {"activation_offload": True}),
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"activation_offload": True}),
    ],
    "zero_grad": [
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"zero_grad": "zeros"}),
        ("llama-400m-like", 2048, 4, "bf16", "adamw", "flash", {"zero_grad": "zeros"}),
        ("tinyllama-1.1b-like", 2048, 2, "amp_bf16", "adamw", "flash", {"zero_grad": "zeros"}),
        ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {"zero_grad": "zeros"}),
        ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {**CKPT, "zero_grad": "zeros"}),
        ("qwen2.5-0.5b-like", 2048, 1, "bf16", "adamw", "flash", {"zero_grad": "zeros", "grad_accum": 2}),
    ],
    # an evaluation forward after each step (train.evaluate, the HF Trainer's order), larger than the step or not
    "eval": [
        ("llama-400m-like", 2048, 2, "bf16", "adamw", "flash", {"eval_micro_batch": 16}),
        ("llama-400m-like", 2048, 2, "amp_bf16", "adamw", "flash", {"eval_micro_batch": 16}),
        ("llama-400m-like", 2048, 2, "bf16", "adamw", "flash", {"eval_micro_batch": 16, "lora_rank": 16,
                                                                "lora_targets": "qv"}),
        ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "eager", {"eval_micro_batch": 16}),
        ("qwen2.5-0.5b-like", 2048, 1, "bf16", "adamw", "flash", {"eval_micro_batch": 8, "zero_grad": "zeros"}),
        ("llama-3.2-1b-like", 4096, 1, "amp_bf16", "adamw", "flash", {**CKPT, "eval_micro_batch": 8}),
        ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {"eval_micro_batch": 2}),
    ],
    # precision fp8 (torchao Float8Linear, torchtitan's rowwise recipe) beside amp_bf16, the same model otherwise
    "fp8": [
        ("llama-400m-like", 2048, 2, "fp8", "adamw", "flash", {}),
        ("llama-400m-like", 2048, 4, "fp8", "adamw", "flash", CKPT),
        ("llama-400m-like", 1024, 2, "fp8", "adamw", "eager", {}),
        ("tinyllama-1.1b-like", 2048, 2, "fp8", "adamw", "flash", {}),
        ("llama-3.2-1b-like", 2048, 1, "fp8", "adamw", "flash", {}),
        ("llama-3.2-1b-like", 4096, 1, "fp8", "adamw", "flash", CKPT),
        ("qwen2.5-0.5b-like", 2048, 2, "fp8", "adamw", "flash", {}),
    ],
    # recipes as torchtune / torchtitan configure them (several knobs at once)
    "recipe": [
        ("llama-3.2-1b-like", 2048, 4, "bf16", "adamw", "flash",
         {"optimizer_impl": "fused", "optimizer_in_backward": True, "loss_impl": "chunked"}),
        ("llama-3.2-1b-like", 4096, 2, "bf16", "adamw", "flash",
         {**CKPT, "activation_offload": True, "optimizer_impl": "fused", "loss_impl": "chunked"}),
        ("llama-3.2-1b-like", 8192, 1, "amp_bf16", "adamw", "flash", {**SAC, "optimizer_impl": "fused"}),
    ],
}
BASE_PRECISION = {"fp8": "amp_bf16"}  # fp8 trains fp32 parameters under bf16 autocast, as amp_bf16 does
KNOB_TAGS = {  # field -> case-id suffix
    "checkpointing": {"full": "ckpt", "selective_op": "sac"},
    "checkpoint_every": lambda v: f"every{v}",
    "loss_impl": {"chunked": "chunked", "fused_linear": "flce"},
    "optimizer_impl": {"fused": "fused", "forloop": "forloop"},
    "optimizer_in_backward": {True: "inbwd"},
    "activation_offload": {True: "offload"},
    "zero_grad": {"zeros": "zeros"},
    "grad_accum": lambda v: f"ga{v}",
    "eval_micro_batch": lambda v: f"eval{v}",
    "lora_rank": lambda v: f"lora{v}",
}


def case_id(model: str, seq: int, mb: int, precision: str, optimizer: str, attention: str, fields: dict) -> str:
    """A readable unique id, e.g. ``llama-3.2-1b-like_bf16_adamw_flash_s2048_b1_chunked8_fused``."""
    parts = [model, precision, optimizer, attention, f"s{seq}", f"b{mb}"]
    for k, tag in KNOB_TAGS.items():
        v = fields.get(k)
        if v is not None:
            parts.append(tag(v) if callable(tag) else tag.get(v, ""))
    if fields.get("loss_impl") == "chunked":
        i = parts.index("chunked")
        parts[i] = f"chunked{fields.get('loss_chunks', RECIPE_DEFAULTS['loss_chunks'])}"
    return "_".join(p for p in parts if p)


def recipe_cases() -> list[tuple[str, str, dict]]:
    """(case_id, knob, case) for every knob case and, once each, its baseline."""
    out, seen = [], set()
    for knob, cases in KNOB_CASES.items():
        for model, seq, mb, precision, optimizer, attention, fields in cases:
            base = {k: v for k, v in fields.items() if k not in RECIPE_DEFAULTS or k == "checkpointing"}
            if fields.get("checkpointing") == "selective_op":
                base.pop("checkpointing")
            base_precision = BASE_PRECISION.get(precision, precision)
            for name, p, f in (("baseline", base_precision, base), (knob, precision, fields)):
                cid = case_id(model, seq, mb, p, optimizer, attention, f)
                if cid in seen:
                    continue
                seen.add(cid)
                out.append((cid, name, {"model": model, **MODELS[model], "seq_len": seq, "micro_batch": mb,
                                        "precision": p, "optimizer": optimizer, "attention": attention, **f}))
    return out


def columns() -> list[str]:
    """The CSV header of recipes.csv."""
    return RECIPE_SET_COLUMNS


def measure_row(cid: str, knob: str, case: dict, device: str = "fake") -> dict:
    """One CSV row: the measured case with its id and knob (``baseline`` for a knob's reference case)."""
    return {"case_id": cid, "knob": knob, **measure_recipe_case(case, device)}


def measure_recipe_case(case: dict, device: str = "fake") -> dict:
    """``measure_case`` plus ``measured_host_peak_bytes`` (peak of host-resident bytes in the measured step)."""
    from engine.checks.measure.case import resolve
    from engine.checks.measure.measure import MEASURE_DEVICE, versions
    from engine.checks.measure.single_gpu import MEASURED_STEP, run_logged, summarize

    c = resolve(case)
    lb, roles, model = run_logged(c, device)
    host = host_peak(lb, lb.marks[f"step{MEASURED_STEP}"], lb.marks[f"end{MEASURED_STEP}"])
    return {**c, **summarize(lb, roles, model, c["allocator"]), HOST_COLUMN: host,
            "measure_device": MEASURE_DEVICE[device],
            **versions(), "torchao_version": _torchao_version() if c["precision"] == "fp8" else ""}


def _torchao_version() -> str:
    import torchao

    return torchao.__version__


def host_peak(lb, start: int, end: int) -> int:
    """Peak of live host-resident bytes (records marked ``host``) over ticks ``start``..``end``."""
    live, events = 0, []
    for r in (r for r in lb.records if r.host):
        if r.born < start and (r.died is None or r.died > start):
            live += r.nbytes
        if start <= r.born <= end:
            events.append((r.born, r.nbytes))
        if r.died is not None and start <= r.died <= end:
            events.append((r.died, -r.nbytes))
    best = live
    for _, delta in sorted(events):
        live += delta
        best = max(best, live)
    return best
