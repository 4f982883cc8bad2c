"""A full checkpoint save traced on the CPU after two FSDP2 training steps, against memsim's save phase (save.py).

    python -m engine.checks.measure.save_probe          # five layouts, about a minute on two cores

Each case runs two training steps of rank 0 of an FSDP2 layout in `memsim measure`'s simulated world
(parallel_run.run_rank), then saves the model's and the optimizer's state dicts as torchtune's distributed recipes and
accelerate's FULL_STATE_DICT under FSDP2 do: torch.distributed.checkpoint.state_dict get_model_state_dict and
get_optimizer_state_dict with StateDictOptions(full_state_dict=True, cpu_offload=True), the gradients freed first as
their loops free them after each optimizer step. Printed per case: what the device holds when the save begins, the
most it adds while saving (the host copies left out) and the tensors it gathers, against memsim's save_gather_bytes
and its whole save phase (peak.save_peak). Findings: data/measured/PARALLEL.md, "The checkpoint's save".
"""

from __future__ import annotations

import sys

from engine.checks.measure.probe_cli import print_reports

MIB = 2**20
MP = {"fsdp_param_dtype": "bfloat16", "fsdp_reduce_dtype": "float32"}
# (model, precision, FSDP2 layout and harness fields): amp over fp32 parameters and pure bf16, untied and tied heads,
# an MoE model's experts
CASES = [
    ("llama-400m-like", "amp_bf16", {"dp": 4, "framework": "fsdp", "zero_stage": 3, **MP}),
    ("llama-400m-like", "bf16", {"dp": 4, "framework": "fsdp", "zero_stage": 3}),
    ("qwen2.5-0.5b-like", "amp_bf16", {"dp": 4, "framework": "fsdp", "zero_stage": 3, **MP}),
    ("tinyllama-1.1b-like", "amp_bf16", {"dp": 8, "framework": "fsdp", "zero_stage": 3, **MP}),
    ("mixtral-8x7b-2l", "amp_bf16", {"dp": 2, "framework": "fsdp", "zero_stage": 3, **MP}),  # experts as 3D params
]


def case_of(model: str, precision: str, layout: dict) -> dict:
    """A `memsim measure` case: the model's dims, a short sequence (the save does not depend on it), rank 0."""
    from engine.checks.measure.reference_parallel_cases import MODELS

    return {"model": model, **MODELS[model], "seq_len": 256, "micro_batch": 1, "precision": precision,
            "optimizer": "adamw", "attention": "flash", **layout, "n_gpus": layout["dp"], "rank": 0,
            "save_state_dict": "full"}


def traced_save(c: dict) -> dict:
    """Two steps of rank 0, then the full save: the device bytes when it begins, the most it holds beyond them while
    saving, and the largest tensor gathered.

    The simulated world keeps its fake tensors on the host device, where `.to(cpu)` copies nothing: each gathered
    tensor stays in the state dict the save returns. On a GPU it is copied to the host right after its gather and its
    device copy dropped (_state_dict_utils.py _iterate_state_dict), so here each one is taken as freed when the next
    one is gathered."""
    from torch.utils._pytree import tree_leaves

    from engine.checks.measure.parallel_run import run_rank

    seen: dict = {}

    def save(model, opt, lb) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opt.zero_grad(set_to_none=True)  # as torchtune's and the HF Trainer's loops do after the step, before a save
        lb.phase, first = "save", len(lb.records)
        base = lb.live_bytes()
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        saved = [get_model_state_dict(model, options=options), get_optimizer_state_dict(model, opt, options=options)]
        outputs = {id(r) for r in map(lb.record_of, [t for t in tree_leaves(saved) if hasattr(t, "untyped_storage")])
                   if r is not None}
        made = [r for r in lb.records[first:] if not r.host]
        gathered = [r for r in made if id(r) in outputs]
        ends = {id(r): nxt.born for r, nxt in zip(gathered, gathered[1:])}  # on the host once the next one is made
        events = []
        for r in made:
            died = ends.get(id(r), r.died if id(r) not in outputs else lb.clock + 1)
            events += [(r.born, r.nbytes), (died if died is not None else lb.clock + 1, -r.nbytes)]
        live = peak = 0
        for _, delta in sorted(events):
            live += delta
            peak = max(peak, live)
        seen.update(base=base, extra=peak, largest=max((r.nbytes for r in gathered), default=0),
                    tensors=len(gathered))

    run_rank(c, after=save)
    return seen


def report(model: str, precision: str, layout: dict) -> str:
    """One line: the traced save (the device bytes when it begins, the most it adds, the tensors it gathers) against
    memsim's (the one tensor save_gather_bytes counts, and the whole save phase peak.save_peak allocates)."""
    from engine.checks.measure.case import resolve
    from engine.configure.resolve import resolve_cases
    from engine.model.kernel import PlainRecord
    from engine.model.levels import rank_terms
    from engine.model.peak import save_peak

    case = case_of(model, precision, layout)
    seen = traced_save(resolve(case))
    inputs = {k: v for k, v in case.items() if k not in ("model", "rank", "fsdp_param_dtype", "fsdp_reduce_dtype")}
    records, _, _ = resolve_cases([inputs])
    c = PlainRecord(records[0])
    r = rank_terms(c)
    traced = seen["base"] + seen["extra"]
    whole = save_peak(c, r).allocated_bytes
    base, extra, largest = (seen[k] / MIB for k in ("base", "extra", "largest"))
    return (f"{model:20s} {precision:9s} dp {layout['dp']}  traced: {base:7.1f} MiB + {extra:6.1f} "
            f"({seen['tensors']} tensors, the largest {largest:6.1f})  memsim: + {r.save_bytes / MIB:6.1f}, "
            f"the save {whole / MIB:7.1f} MiB against {traced / MIB:7.1f} ({100 * (whole - traced) / traced:+.1f}%)")


def main() -> int:
    return print_reports(lambda: (report(*case) for case in CASES))


if __name__ == "__main__":
    sys.exit(main())
