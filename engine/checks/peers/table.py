"""docs/peers.md's table: the three peers beside memsim on a few configurations (`python -m engine.checks.peers.table`)."""

from engine.checks.peers.common import record
from engine.checks.peers.deepspeed import deepspeed_zero_estimate
from engine.checks.peers.llm_analysis import llm_analysis
from engine.checks.peers.megatron import megatron_theoretical

DOC_CASES = {
    "Llama-2-13B, ZeRO-3, full ckpt, mb 4 x 4096, 8 x A100-80GB": dict(
        model="llama-2-13b", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40, d_ff=13824, vocab=32000,
        ffn_type="swiglu", tied_embeddings=False, norm_type="rmsnorm", zero_stage=3, checkpointing="full",
        precision="amp_bf16", optimizer="adamw", micro_batch=4, seq_len=4096, n_gpus=8, dp=8, gpu="a100-sxm-80gb",
        attention="flash", framework="deepspeed"),
    "Llama-3.1-8B, 1 x H100-80GB, flash, mb 1 x 8192, selective": dict(
        model="llama-3.1-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab=128256,
        ffn_type="swiglu", tied_embeddings=False, norm_type="rmsnorm", zero_stage=0, checkpointing="selective",
        precision="amp_bf16", optimizer="adamw", micro_batch=1, seq_len=8192, n_gpus=1, gpu="h100-sxm-80gb",
        attention="flash"),
    "GPT-3 175B, TP 8 PP 8 vpp 3, SP + selective, mb 1 x 2048, 64 micro-batches": dict(
        model="gpt-3-175b", n_layers=96, d_model=12288, n_heads=96, d_ff=49152, vocab=51200, ffn_type="gelu",
        tied_embeddings=True, norm_type="layernorm", linear_bias="all", n_positions=2048, tp=8, pp=8, dp=1,
        n_gpus=64, sp=True, pp_schedule="interleaved", vpp=3, checkpointing="selective", micro_batch=1,
        seq_len=2048, grad_accum=64, precision="amp_bf16", optimizer="adam", dropout=0.1,
        framework="megatron", gpu="a100-sxm-80gb", attention="flash"),
}


def _memsim(case: dict) -> dict | None:
    """memsim's own outputs through engine.ask.evaluate.evaluate_case, when it runs (None otherwise)."""
    try:
        from engine.ask.evaluate import evaluate_case

        return evaluate_case(case)
    except Exception:  # the memsim column is optional: the peers do not depend on it
        return None


def table(with_memsim: bool = True) -> str:
    """docs/peers.md's table: model states, activations and total per tool, GiB per GPU."""
    gib = lambda x: "—" if x is None else f"{x / 2**30:.2f}"  # noqa: E731
    lines = ["| configuration | quantity | DeepSpeed estimator | Megatron theoretical | llm-analysis | memsim |",
             "|---|---|---:|---:|---:|---:|"]
    for label, case in DOC_CASES.items():
        c = record(**case)
        ds, mg, la = deepspeed_zero_estimate(c), megatron_theoretical(c), llm_analysis(c)
        ms = _memsim(case) if with_memsim else None
        states = la["weight"] + la["gradient"] + la["optimizer_state"]
        mine = (ms["weight_bytes"] + ms["grad_bytes"] + ms["optimizer_bytes"], ms["activation_bytes"],
                ms["allocated_peak_bytes"], ms["device_peak_bytes"]) if ms else (None,) * 4
        rows = [("model states", ds, mg["weight_and_optimizer"], states, mine[0]),
                ("activations", None, mg["activation"], la["activation"], mine[1]),
                ("total", ds, mg["total"], la["total"], mine[2]),
                ("device peak (nvidia-smi)", None, None, None, mine[3])]
        for i, (what, *vals) in enumerate(rows):
            lines.append(f"| {label if i == 0 else ''} | {what} | " + " | ".join(gib(v) for v in vals) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(table(with_memsim="--no-memsim" not in sys.argv))
