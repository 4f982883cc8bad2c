"""`memsim verify`: check that a (sharded) sweep dataset is complete; print what to re-run."""

import argparse

from engine.errors import UserError

HELP = "check that a (sharded) sweep dataset is complete and every byte is as written; print what to re-run"
EXAMPLE = """Example:
  memsim verify out/default
  memsim verify s3://bucket/sweeps/big

Checks every shard's part against its completion marker (rows, index range, size and SHA-256) and ends with
who wrote the shards, per Ray node or host. Exit 0 when complete, 2 with the commands that complete it."""


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="sweep dataset: a directory or a URI (s3://..., gs://..., file://...)")
    p.set_defaults(run=run)


def run(args) -> None:
    from engine.dataset.verify import render_verification, verify_dataset

    v = verify_dataset(args.dir)
    print(render_verification(v))
    if not v.ok:
        raise UserError(f"{args.dir} is incomplete: {len(v.rerun)} shard(s) to re-run"
                        f"{f', {len(v.stray)} stray file(s)' if v.stray else ''} (listed above)")
