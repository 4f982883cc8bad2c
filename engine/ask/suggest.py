"""What `memsim explain` suggests for a configuration that does not fit: single changes (changes.py) priced in
speed and dollars beside their peak, and a step-by-step combination that fits.

The rules (issue #22):
    - a change is offered only when it relieves the resource that fails and makes neither worse: the GPU's memory
      (a lower device peak) or, when the GPU holds the peak but the offload overflows the host, the host's RAM
      (fewer host bytes: never "offload activations to host RAM" then); a change that overflows the host while
      relieving the GPU is not offered either
    - those that fit come first, the ones that keep the training method (full, LoRA, QLoRA) and the GPU count before
      those that switch them, each group fastest first (tokens per GPU per second; unknown speed last), then by peak
    - the combination is the fastest chain of such changes that fits, the method and GPU count kept where a chain
      keeps them (`combined`)
"""

import math

from engine.ask.changes import variants
from engine.ask.evaluate import evaluate_cases
from engine.inputs.codes import Framework, name_of
from engine.model.levels import host_ram_per_gpu

TIME_FIELDS = ("step_time_s", "tokens_per_gpu_s", "mfu", "cost_per_mtok")


def method_of(rec) -> tuple[int, int]:
    return int(rec.lora_rank > 0), int(rec.base_quant)


def host_over(result: dict) -> int:
    """Host bytes beyond the host RAM one GPU may fill (0 when within it, or unknown)."""
    ram = int(host_ram_per_gpu(result["record"]))
    return max(0, result["host_bytes"] - ram) if ram > 0 and result["host_bytes"] >= 0 else 0


def gpu_over(result: dict) -> int:
    return max(0, result["device_peak_bytes"] - result["usable_bytes"])


def failing(result: dict) -> str:
    """The resource a configuration that does not fit runs out of: the GPU's memory, else the host's RAM."""
    return "gpu" if gpu_over(result) > 0 else "host"


def priced(label: str, change: dict, r: dict, base) -> dict:
    """A tried change with its peak, speed and price, as explain's suggestions carry them, and whether it keeps the
    training method and the fleet (the GPU count) of the configuration `base`."""
    return {"change": label, "set": change, "device_peak_bytes": r["device_peak_bytes"], "fits": bool(r["fits"] == 1),
            **{k: r[k] for k in TIME_FIELDS}, "host_bytes": r["host_bytes"],
            "keeps_method": method_of(r["record"]) == method_of(base), "keeps_fleet": r["record"].n_gpus == base.n_gpus,
            "record": r["record"], "gpu_over": gpu_over(r), "host_over": host_over(r)}


def kept(s: dict) -> bool:
    """A change that keeps what the user trains and on how many GPUs."""
    return s["keeps_method"] and s["keeps_fleet"]


def try_variants(case: dict, rec) -> list[dict]:
    """Each single change, priced, for layouts that can run, evaluated in one batch."""
    options = variants(case, rec)
    results = evaluate_cases([{**case, **change} for _, change in options])
    return [priced(label, change, r, rec) for (label, change), r in zip(options, results)
            if r is not None and r["valid"]]


def relieves(s: dict, current: dict) -> bool:
    """Whether a tried change relieves the failing resource without making either worse."""
    if failing(current) == "gpu":
        return s["device_peak_bytes"] < current["device_peak_bytes"] and s["host_over"] <= host_over(current)
    return s["host_over"] < host_over(current) and s["gpu_over"] == 0


def rank(s: dict) -> tuple:
    """Fits first, the method and fleet kept before a switch, fastest first, then the lowest peak."""
    speed = s["tokens_per_gpu_s"]
    return (not s["fits"], not kept(s), speed is None or math.isnan(speed),
            -(speed or 0.0) if s["fits"] else 0.0, s["gpu_over"] + s["host_over"], s["device_peak_bytes"])


def public(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in ("record", "gpu_over", "host_over")}


def suggestions(case: dict, result: dict, limit: int = 6) -> list[dict]:
    """Single changes that relieve what fails, ranked (`rank`)."""
    current = {**result, "record": result["record"]}
    found = sorted((s for s in try_variants(case, result["record"]) if relieves(s, current)), key=rank)
    return [public(s) for s in found[:limit]]


def speed_of(s: dict) -> float:
    value = s["tokens_per_gpu_s"]
    return -1.0 if value is None or math.isnan(value) else value


def combined(case: dict, result: dict, depth: int = 4, width: int = 3) -> list[dict]:
    """Changes combined step by step until the configuration fits: a beam search over chains of single changes,
    each relieving what still fails (`relieves`), that keeps at each depth the `width` fastest chains that keep
    the training method and the one nearest to fitting; the answer is the chain that fits with the method kept
    (if any), fastest, then fewest steps. A slower fix that fits at once does not hide a faster one two steps
    away (pure bf16, then recomputation, rather than offloading every state)."""
    beams, best = [(dict(case), dict(result), [])], None
    for _ in range(depth):
        grown, seen = [], set()
        for config, current, steps in beams:
            for s in try_variants(config, current["record"]):
                key = frozenset({**config, **s["set"]}.items())
                if key in seen or not relieves(s, current):
                    continue
                seen.add(key)
                chain = steps + [s]
                if s["fits"]:
                    best = min(best or chain, chain, key=chain_rank)
                else:
                    state = {**current, "device_peak_bytes": s["device_peak_bytes"], "host_bytes": s["host_bytes"],
                             "record": s["record"]}
                    grown.append(({**config, **s["set"]}, state, chain))
        if best is not None:  # a chain that fits: go on only with chains that are faster still
            grown = [g for g in grown if speed_of(g[2][-1]) > speed_of(best[-1])]
        beams = next_beams(grown, width)
        if not beams:
            break
    return [public(s) for s in (best or greedy_nearest(beams))]


def chain_rank(chain: list[dict]) -> tuple:
    """The method and fleet kept through every step first, then the fastest, then the fewest steps."""
    return (not all(kept(s) for s in chain), -speed_of(chain[-1]), len(chain))


def next_beams(grown: list, width: int) -> list:
    """The `width` fastest chains that keep the method and fleet, and the chain nearest to fitting."""
    keeping = sorted((g for g in grown if all(kept(s) for s in g[2])), key=lambda g: -speed_of(g[2][-1]))
    nearest = sorted(grown, key=lambda g: (g[2][-1]["gpu_over"] + g[2][-1]["host_over"], g[2][-1]["device_peak_bytes"]))
    out = keeping[:width]
    for g in nearest[:1]:
        if all(g is not o for o in out):
            out.append(g)
    return out


def greedy_nearest(beams: list) -> list[dict]:
    """No chain fits: the one that comes nearest."""
    if not beams:
        return []
    return min(beams, key=lambda b: (b[2][-1]["gpu_over"] + b[2][-1]["host_over"], len(b[2])))[2]


FRAMEWORK_WORDS = {
    Framework.PYTORCH: "FSDP2 without a MixedPrecisionPolicy under torch.autocast, DDP",
    Framework.FSDP: "FSDP2 with bf16 gathers in its MixedPrecisionPolicy",
    Framework.DEEPSPEED: "DeepSpeed ZeRO",
    Framework.MEGATRON: "Megatron-LM",
}
FRAMEWORK_SHIFT = 0.20  # a convention that moves the peak by more than this is worth a line


def framework_peaks(case: dict, rec) -> dict:
    """The device peak under each framework's conventions (data/frameworks.toml), all else the same."""
    frameworks = list(Framework)
    results = evaluate_cases([{**case, "framework": name_of(f)} for f in frameworks])
    return {name_of(f): (r["device_peak_bytes"] if r is not None and r["valid"] else None)
            for f, r in zip(frameworks, results)}


def framework_line(peaks: dict, current: str) -> str:
    """One line when another framework's conventions move the peak by more than FRAMEWORK_SHIFT, else ''."""
    mine = peaks.get(current)
    if not mine or mine <= 0:
        return ""
    others = [(f, p) for f, p in peaks.items() if f != current and p and abs(p - mine) > FRAMEWORK_SHIFT * mine]
    if not others:
        return ""
    said = ", ".join(f"{f} {p / 2**30:.2f} GiB ({100 * (p - mine) / mine:+.0f}%)" for f, p in others)
    words = FRAMEWORK_WORDS[Framework[current.upper()]]
    return (f"framework = {current} ({words}) decides much of this peak; under another framework's conventions: "
            f"{said} (--framework; memsim plan searches them)")
