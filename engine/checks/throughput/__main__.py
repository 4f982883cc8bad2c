"""python -m engine.checks.throughput [--fit | --loso] [--markdown] (engine/checks/throughput/__init__.py)."""

import argparse

from engine.checks.throughput.calibration import HOLDERS, comparable, current, fit, leave_one_source_out
from engine.checks.throughput.comparison import throughput_results
from engine.checks.throughput.report import markdown, render, render_loso
from engine.checks.throughput.rows import prepared, throughput_rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="memsim's time model against published training throughput")
    parser.add_argument("--fit", action="store_true", help="refit the calibrated constants on every comparable row")
    parser.add_argument("--loso", action="store_true", help="leave-one-source-out: each source held out of the fit")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.fit:
        found = fit(comparable(prepared(throughput_rows())))
        for name, value in found.items():
            held = HOLDERS[name].__name__.rsplit(".", 1)[-1] + ".py"
            print(f"{name:<22} fitted {value:.4f}   {held} {current(name)}")
    elif args.loso:
        print(render_loso(leave_one_source_out()))
    else:
        results = throughput_results()
        print(markdown(results) if args.markdown else render(results))


if __name__ == "__main__":
    main()
