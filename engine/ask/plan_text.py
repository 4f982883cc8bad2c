"""`memsim plan`'s answer as text: what was searched, then each plan with its speed, price, memory and what it
changes, and the `memsim explain` command that shows it whole; when nothing fits, the closest miss and why."""

from engine.inputs.vocabulary import INPUTS, spell

GIB = 2**30
SHOWN_DEFAULTS = {"model", "gpu", "n_gpus"}  # always on the explain command line


def render(result: dict) -> str:
    lines = [header(result), searched(result), ""]
    if result["plans"]:
        for k, p in enumerate(result["plans"], 1):
            lines += plan_lines(k, p, result) + [""]
    else:
        lines += nothing_fits(result)
    return "\n".join(lines).rstrip()


def header(result: dict) -> str:
    kept = ("full training, LoRA or QLoRA" if result["method"] == "any"
            else f"{result['user_method']} training kept (--method any tries the others)")
    return (f"memsim plan: {result['model']} on {fleet(result)} x {result['gpu']}, global batch "
            f"{result['global_batch']:,} x {result['seq_len']:,} tokens; {kept}\n{yours(result['yours'])}")


def yours(out: dict) -> str:
    """The user's own configuration, for comparison."""
    if not out["valid"]:
        return f"your configuration cannot run ({out['invalid_reason']})"
    verdict = "fits" if out["fits"] else "does not fit"
    rate = "" if out["tokens_per_gpu_s"] is None else f", {out['tokens_per_gpu_s']:,.0f} tokens/s per GPU"
    return (f"your configuration: peak {out['device_peak_bytes'] / GIB:.1f} GiB of {out['usable_bytes'] / GIB:.1f} "
            f"usable, {verdict}{rate}")


def fleet(result: dict) -> str:
    counts = sorted({p["inputs"]["n_gpus"] for p in result["plans"]} | {result["user"]["n_gpus"]})
    return " or ".join(f"{n:,}" for n in counts) if len(counts) > 1 else f"{counts[0]:,}"


def searched(result: dict) -> str:
    order = "fastest first" if result["rank_by"] == "time" else "cheapest per token first"
    return (f"searched {result['searched']:,} configurations ({result['grids']} grids through the sweep kernel, "
            f"{result['seconds']:.1f} s): {result['valid']:,} can run, {result['fitting']:,} fit; {order}")


def speed(out: dict, n_gpus: int) -> str:
    if out["tokens_per_gpu_s"] is None:
        return "time unknown (the catalog lacks a rate this layout needs: a link beyond one node?)"
    mfu = "n/a" if out["mfu"] is None else f"{100 * out['mfu']:.0f}%"
    cost = "no catalog price" if out["cost_per_mtok"] is None else f"${out['cost_per_mtok']:.2f} per million tokens"
    return (f"{out['tokens_per_gpu_s']:,.0f} tokens/s per GPU ({out['tokens_per_gpu_s'] * n_gpus:,.0f} for the job), "
            f"MFU {mfu}, step {out['step_time_s']:.2f} s, {cost}")


def amount(tokens: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:g}{suffix}"
    return f"{tokens:g}"


def memory(p: dict) -> str:
    out = p["outputs"]
    spare = (out["usable_bytes"] - out["device_peak_bytes"]) / GIB
    host = f"; host RAM {out['host_bytes'] / GIB:.1f} GiB per GPU" if out["host_bytes"] else ""
    return f"peak {out['device_peak_bytes'] / GIB:.1f} GiB of {out['usable_bytes'] / GIB:.1f} usable ({spare:.1f} to spare){host}"


def train(p: dict, tokens: float) -> str:
    if p["days"] is None:
        return ""
    money = "" if p["usd"] is None else f", ${p['usd']:,.0f}"
    return f"; {amount(tokens)} tokens in {p['days']:,.1f} days{money}"


def layout(i: dict) -> str:
    """The plan in a line: layout, sharding, recompute, batch, numerics and recipe."""
    parts = [f"dp {i['dp']}, tp {i['tp']}{' (sp)' if i['sp'] else ''}, pp {i['pp']}"]
    if i["pp"] > 1:
        parts[-1] += f" {i['pp_schedule']}" + (f" x{i['vpp']}" if i["vpp"] > 1 else "")
    parts[-1] += (f", cp {i['cp']}" if i["cp"] > 1 else "") + (f", ep {i['ep']}" if i["ep"] > 1 else "")
    parts.append(f"ZeRO-{i['zero_stage']}" + ("" if i["offload"] == "none" else f" + {i['offload']} offload"))
    every = f" every {i['checkpoint_every']}" if i["checkpointing"] == "full" and i["checkpoint_every"] > 1 else ""
    recompute = "no" if i["checkpointing"] == "none" else i["checkpointing"]
    parts.append(f"{recompute}{every} recompute" + (" + activation offload" if i["activation_offload"] else ""))
    parts.append(f"micro-batch {i['micro_batch']} x {i['grad_accum']}")
    compiled = " + compile" if i.get("compile") else ""
    parts.append(f"{i['precision']}, {i['framework']}{compiled}, {i['optimizer_impl']} step, {i['loss_impl']} loss")
    if i["lora_rank"]:
        parts.append(f"LoRA r={i['lora_rank']}" + (f" on {i['base_quant']}" if i["base_quant"] != "none" else ""))
    return "; ".join(parts)


def changed(p: dict) -> str:
    if not p["changes"]:
        return "changes nothing in your configuration"
    return "changes: " + ", ".join(f"{name} {spelled(old)} -> {spelled(new)}" for name, old, new in p["changes"])


def spelled(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def command(p: dict, user: dict) -> str:
    """`memsim explain` with every input of the plan that is not the vocabulary's default (dp derived)."""
    names = ["model", "gpu", "n_gpus"] + [n for n in INPUTS if n in p["inputs"] and n not in SHOWN_DEFAULTS]
    flags = [f"--{name.replace('_', '-')} {spelled(p['inputs'][name])}" for name in names
             if name not in ("dp", "recipe") and (name in SHOWN_DEFAULTS or p["inputs"][name] != default(name))]
    return "memsim explain " + " ".join(flags)


def default(name: str):
    field = INPUTS[name]
    return field.default if field.kind == "str" else spell(name, field.default)


def plan_lines(k: int, p: dict, result: dict) -> list[str]:
    return [f"{k}. {speed(p['outputs'], p['inputs']['n_gpus'])}",
            f"   {memory(p)}{train(p, result['tokens'])}",
            f"   {layout(p['inputs'])}",
            f"   {changed(p)}",
            f"   {command(p, result['user'])}"]


def nothing_fits(result: dict) -> list[str]:
    """Why no plan fits: the closest miss and the resource it misses on, or why nothing can run."""
    if not result["closest"]:
        return [f"NOTHING FITS: none of the {result['searched']:,} configurations can run on this fleet "
                "(every layout breaks a rule: heads over TP, layers over stages, the global batch over dp)."]
    p = result["closest"][0]
    out = p["outputs"]
    over = (out["device_peak_bytes"] - out["usable_bytes"]) / GIB
    why = (f"its peak is {over:.1f} GiB over the usable memory, the largest part {out['bottleneck']}" if over > 0
           else f"the GPU holds it ({-over:.1f} GiB to spare) but its offload needs {out['host_bytes'] / GIB:.1f} GiB "
                "of host RAM per GPU, more than the node has")
    return [f"NOTHING FITS: of {result['valid']:,} configurations that can run, none fits. The closest: {why}.",
            f"   {memory(p)}", f"   {layout(p['inputs'])}", f"   {changed(p)}", f"   {command(p, result['user'])}",
            "Try more GPUs (--n-gpus), a smaller global batch or sequence, or --method any (LoRA, QLoRA)."]
