"""The time model against published training throughput (data/golden/throughput.csv, its sources in THROUGHPUT.md).

Each row is a real run with its configuration in CONFIG.md names and the figure its source printed. The
comparison is tokens per second per GPU, the definition-free figure: where a source printed only TFLOP/s, they are
turned into tokens/s with the source's own FLOP count (Narayanan et al.'s Eq. 3 for `hardware_eq3`, the PaLM
definition memsim's MFU uses for `model`). What a row leaves unsaid is filled in by `derivations`, and said.

The time model's calibrated constants (engine/model/gpu_rates.py, step_work.py) are fitted here, on every
comparable row (`calibration.fit`), and checked against sources left out of the fit
(`calibration.leave_one_source_out`):

    python -m engine.checks.throughput            the table and the summary per source
    python -m engine.checks.throughput --fit      the constants a fit finds now, beside those in the model's files
    python -m engine.checks.throughput --loso     each source predicted by constants fitted without it

    rows.py          the published rows: their sources, their figures as tokens/s, what they leave unsaid
    comparison.py    memsim against each row, the summary per source, the known misses
    calibration.py   the fit of the calibrated constants, and leave-one-source-out
    report.py        the comparison as a text or markdown table
    __main__.py      the command above
"""
