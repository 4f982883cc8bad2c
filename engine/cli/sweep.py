"""`memsim sweep`: every configuration of a spec into a Parquet dataset; shards, plans and Ray."""

import argparse
import time

from engine.errors import UserError

HELP = "evaluate every configuration of a sweep spec into a Parquet dataset"
EXAMPLE = """Example:
  memsim sweep data/sweeps/default.toml -o out/default
  memsim sweep data/sweeps/default.toml --plan 16 -o out/default
  memsim sweep data/sweeps/default.toml --engine ray --shards 16 -o out/default"""


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="sweep spec (TOML with an [axes] table), e.g. data/sweeps/default.toml")
    p.add_argument("-o", "--output", help="dataset directory, or a URI (file://..., s3://...)")
    p.add_argument("--shard", help="K/N: evaluate only shard K of N (0-based) into the same dataset")
    p.add_argument("--plan", type=int, metavar="N", help="print N shards' ranges and sizes and how to run them; sweeps nothing")
    p.add_argument("--engine", choices=["local", "ray"], default="local", help="ray: run the shards as Ray tasks (pip install 'memsim[ray]')")
    p.add_argument("--address", help="with --engine ray: the cluster (HOST:6379 or ray://HOST:10001); default: start Ray here")
    p.add_argument("--shards", type=int, metavar="N", help="with --engine ray: number of shards (default: an existing dataset's, else the cluster's CPUs / 2)")
    p.add_argument("--feasible-only", action="store_true", help="write only valid rows that fit")
    p.add_argument("--valid-only", action="store_true", help="write only valid rows (configurations that can run)")
    p.add_argument("--force", action="store_true", help="write even if the disk looks too small, or replace another sweep in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UserError(f"--shard takes K/N (e.g. 3/16), got {text!r}") from None
    if n < 1 or not 0 <= k < n:
        raise UserError(f"shard {text} is out of range: use K/N with 0 <= K < N")
    return k, n


def run(args) -> None:
    t0 = time.perf_counter()
    from engine.cli.first_run import show_notices
    from engine.dataset.sweep import explain_no_valid, run_sweep

    if args.plan is not None:
        return run_plan(args)
    if not args.output:
        raise UserError("memsim sweep needs -o DIR (where the dataset goes), or --plan N to plan shards")
    if args.engine == "ray":
        return run_on_ray(args)
    if args.address or args.shards:
        raise UserError("--address and --shards go with --engine ray; to run one shard here use --shard K/N")
    shard = parse_shard(args.shard) if args.shard else (0, 1)
    if "://" in args.output:  # an object-store (or file://) URI: staged locally, published through pyarrow.fs
        from engine.dataset.shards import sweep_shard as run_sweep
    show_notices()  # the kernel says so when it compiles; a sweep of a few hundred rows runs in Python and never does
    result = run_sweep(args.spec, args.output, shard=shard, force=args.force,
                       feasible_only=args.feasible_only or None, valid_only=args.valid_only or None,
                       progress=False if args.quiet else None)
    rate = result.evaluated / max(result.seconds, 1e-9)
    whole = f"{time.perf_counter() - t0:.1f} s in all, with reading the spec{' and compiling the kernel' if result.compiled else ''}"
    print(f"{result.evaluated:,} configurations in {result.seconds:.2f} s of evaluating and writing ({rate / 1e6:.2f} M/s; "
          f"{whole}): {result.valid:,} valid, {result.fits:,} fit; {result.written:,} rows -> {result.out_dir}")
    if result.valid == 0:
        raise UserError(f"no valid configuration in this sweep: {explain_no_valid(result)}")


def run_plan(args) -> None:
    from engine.dataset.shards import plan_shards, render_plan

    grid, keep, plans = plan_shards(args.spec, args.plan, args.feasible_only or None, args.valid_only or None)
    print(render_plan(args.spec, grid, keep, plans, args.output))


def run_on_ray(args) -> None:
    from engine.dataset.ray_backend import run_ray

    if args.shard:
        raise UserError("--shard runs one shard here; with --engine ray give the number of shards: --shards N")
    r = run_ray(args.spec, args.output, n_shards=args.shards, address=args.address, force=args.force,
                feasible_only=args.feasible_only or None, valid_only=args.valid_only or None)
    rate = r.evaluated / max(r.seconds, 1e-9)
    print(f"{r.evaluated:,} configurations in {r.n_shards} shards, {r.seconds:.2f} s ({rate / 1e6:.2f} M/s): "
          f"{r.valid:,} valid, {r.fits:,} fit; {r.written:,} rows -> {r.out}")
