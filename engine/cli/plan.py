"""`memsim plan`: the fastest (or cheapest) configurations of a model on a fleet that fit, from the sweep kernel."""

import argparse

from engine.cli.flags import add_config_flags, given_config
from engine.errors import UserError

HELP = "the fastest (or cheapest) configurations that fit, each priced in speed and dollars"
EXAMPLE = """Example:
  memsim plan --model llama-3.1-70b --gpu h100-sxm-80gb --n-gpus 64 --seq-len 8192 --global-batch 64
  memsim plan --model llama-3.1-70b --gpu rtx-4090 --n-gpus 2 --method any --json"""


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Searches, with the sweep kernel, the layout (dp, tp, pp and its schedule, cp, ep, "
                       "ZeRO stage), recomputation, micro-batch and accumulation at the global batch, precision, "
                       "optimizer step, loss, offload, activation offload and framework conventions around the "
                       "configuration the other flags give (as memsim explain reads them), keeping its training "
                       "method unless --method any. --n-gpus takes one count or several (8,16,32).")
    add_config_flags(p)
    p.add_argument("--global-batch", metavar="B", type=int,
                   help="samples per optimizer step, micro_batch x grad_accum x dp (default: the configuration's)")
    p.add_argument("--tokens", metavar="T", type=float, default=1e12,
                   help="tokens to train, for each plan's days and dollars (default: 1e12)")
    p.add_argument("--rank-by", choices=["time", "cost"], default="time",
                   help="time: the job's tokens/s, fastest first (default); cost: $ per million tokens, cheapest first")
    p.add_argument("--method", choices=["keep", "any"], default="keep",
                   help="keep: the configuration's training method (full, LoRA, QLoRA; default); any: all three")
    p.add_argument("--top", metavar="K", type=int, default=5, help="plans to show (default: 5)")
    p.add_argument("--json", action="store_true",
                   help='a list, best first, of {"inputs": {CONFIG.md inputs}, "outputs": {as explain --json}}')
    p.set_defaults(run=run)


def gpu_counts(text) -> tuple[int, ...]:
    """--n-gpus 64 or 8,16,32."""
    if text is None:
        raise UserError("memsim plan needs --n-gpus: the fleet's GPU count (or counts: 8,16,32)")
    try:
        counts = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        raise UserError(f"--n-gpus takes GPU counts such as 64 or 8,16,32, got {text!r}") from None
    return counts


def run(args) -> None:
    import sys

    from engine.ask.plan import PlanRequest, plan, to_json
    from engine.ask.plan_text import render
    from engine.cli.first_run import show_notices

    config = given_config(args)
    counts = gpu_counts(config.pop("n_gpus", None))
    show_notices()  # the search's kernel says so when it compiles (after the inputs are checked)
    result = plan(PlanRequest(config, counts, args.global_batch, args.tokens, args.rank_by, args.method, args.top))
    if args.json:
        print(to_json(result))
        if not result["plans"]:
            print(f"memsim: nothing fits; {len(result['closest'])} closest miss (memsim plan without --json says why)",
                  file=sys.stderr)
        return
    print(render(result))
