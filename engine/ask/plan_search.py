"""The search behind `memsim plan`: every grid of plan_space.py through the sweep kernel, reduced chunk by chunk to
the best configurations that fit, and the closest one when none does.

Each grid is a sweep spec over the user's resolved record (engine/configure/grid.py); the sweep kernel evaluates
it in chunks (engine/dataset/chunks.py) and each chunk is reduced with numpy, never a Python loop over rows:

    score     the job's tokens per second (tokens_per_gpu_s x n_gpus) for --rank-by time, minus $ per million
              tokens for --rank-by cost; -inf where the time or the price is unknown
    changes   how many of the user's inputs the configuration changes (per axis digit, summed)
    spare     usable - device peak

Rows that fit are ranked by score, then fewer changes, then more spare, and one row is kept per score (scores
within SAME_SCORE of each other count as one), so the plans shown differ in speed, each the simplest way to get
it; rows of unknown speed by fewer changes and more spare, one per device peak. The closest row, when nothing fits, is the valid one whose device peak and
host RAM exceed their budgets by the fewest bytes.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from engine.ask.plan_space import Space
from engine.configure.grid import FIELD_INDEX, Grid, build_grid, words
from engine.configure.resolve import MODEL_FIELD_NAMES
from engine.configure.spec import parse_spec
from engine.dataset.chunks import Chunk, SweepKernel
from engine.dataset.columns import axis_digits
from engine.inputs.vocabulary import GPU_ATTRIBUTES, INPUTS, spell
from engine.model.levels import host_ram_per_gpu
from engine.model.outputs import OUTPUTS

CHUNK_ROWS = 1 << 20
KEEP = 64  # distinct scores kept per chunk (a plan shows at most this many)
SAME_SCORE = 0.005  # scores within 0.5% are one speed: the simplest configuration of it is kept


@dataclass
class Found:
    """Rows kept from the search: where each is (grid, index), its ranking keys and every output."""

    grid: list = field(default_factory=list)
    index: list = field(default_factory=list)
    score: list = field(default_factory=list)
    changes: list = field(default_factory=list)
    spare: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # one {column: value} per row, dp and n_gpus too

    def add(self, g: int, chunk: Chunk, rows: np.ndarray, score, changes, spare) -> None:
        values = {name: chunk.values(name, rows) for name in [*OUTPUTS, "dp", "n_gpus"]}
        for k, row in enumerate(rows):
            self.grid.append(g)
            self.index.append(chunk.start + int(row))
            self.score.append(float(score[k]))
            self.changes.append(int(changes[k]))
            self.spare.append(int(spare[k]))
            self.outputs.append({name: v[k] for name, v in values.items()})

    def best(self, keep: int) -> list[int]:
        """Positions of the best rows: walking down the scores, rows within SAME_SCORE of the first of their run are
        one speed, of which the row with the fewest changes (then the most spare) is kept; rows of unknown score,
        one per device peak, by fewest changes."""
        order = sorted(range(len(self.score)), key=lambda i: (-self.score[i], self.changes[i], -self.spare[i],
                                                              self.grid[i], self.index[i]))
        runs, peaks = [], set()
        for i in order:
            s = self.score[i]
            if not math.isfinite(s):
                if self.outputs[i]["device_peak_bytes"] not in peaks:
                    peaks.add(self.outputs[i]["device_peak_bytes"])
                    runs.append([i])
            elif runs and math.isfinite(self.score[runs[-1][0]]) and s >= self.score[runs[-1][0]] - SAME_SCORE * abs(
                    self.score[runs[-1][0]]):
                runs[-1].append(i)
            else:
                runs.append([i])
        picks = [min(run, key=lambda i: (self.changes[i], -self.spare[i], -self.score[i])) for run in runs]
        return picks[:keep]


@dataclass
class Search:
    """What a plan's search found: the grids it ran, how many rows, and the rows kept."""

    grids: list
    user: dict  # the user's inputs (user_inputs)
    evaluated: int = 0
    valid: int = 0
    fitting: int = 0
    found: Found = field(default_factory=Found)
    closest: Found = field(default_factory=Found)  # the nearest miss (kept only while nothing fits)
    miss_bytes: float = math.inf


def plan_grid(space: Space, rec, model_key: str, gpu_key: str) -> Grid:
    """A plan grid: the space's axes over the user's record, its model and GPU exactly as the user's resolved them
    (a config.json's dims, --gpu-memory and other overrides included)."""
    grid = build_grid(parse_spec({"axes": {"model": [model_key], "gpu": [gpu_key], **space.axes}, "link": space.links}))
    user = words(rec)
    grid.base = user
    for axis in grid.axes:
        if axis.name in ("model", "gpu"):
            axis.words[0] = user[[FIELD_INDEX[f] for f in axis.fields]]
    return grid


def user_inputs(rec) -> dict:
    """The user's resolved inputs as plan_space spells them: every record input but the model's dims and the GPU's
    attributes (which the plan never changes)."""
    skip = set(MODEL_FIELD_NAMES) | set(GPU_ATTRIBUTES)
    return {name: spell(name, rec[name]) for name in rec.dtype.names if name not in skip and name in INPUTS}


def change_counts(grid: Grid, user: dict) -> list[np.ndarray]:
    """For each axis, how many of the user's inputs each of its digits changes."""
    out = []
    for axis in grid.axes:
        counts = np.zeros(len(axis.labels), dtype=np.int64)
        if axis.name not in ("model", "gpu"):
            for name, labels in axis.columns:
                counts += np.array([label != user.get(name) for label in labels], dtype=np.int64)
        out.append(counts)
    return out


def chunk_keys(chunk: Chunk, n_gpus: int, rank_by: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fits, score and spare of every row of a chunk (the module docstring)."""
    fits = chunk.values("fits") == 1
    if rank_by == "cost":
        score = -chunk.values("cost_per_mtok")
    else:
        score = chunk.values("tokens_per_gpu_s") * float(n_gpus)
    score = np.where(np.isnan(score), -np.inf, score)
    spare = chunk.values("usable_bytes") - chunk.values("device_peak_bytes")
    return fits, score, spare


def best_rows(score: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows (of `rows`) whose score is among the KEEP highest distinct ones."""
    s = score[rows]
    top = np.argpartition(-s, min(len(s) - 1, 16 * KEEP))[: 16 * KEEP]
    distinct = np.unique(s[top])
    threshold = distinct[-KEEP] if len(distinct) >= KEEP else distinct[0]
    return rows[s >= threshold]


def reduce_chunk(search: Search, g: int, chunk: Chunk, counts: list, n_gpus: int, rank_by: str, host_ram: int) -> None:
    """Fold one chunk into the search: counts, the best fitting rows, the nearest miss."""
    fits, score, spare = chunk_keys(chunk, n_gpus, rank_by)
    valid = chunk.values("valid") == 1
    search.evaluated += chunk.count
    search.valid += int(valid.sum())
    fitting = np.flatnonzero(fits)
    search.fitting += len(fitting)
    if len(fitting):
        rows = best_rows(score, fitting)
        digits = axis_digits(chunk, rows)
        changes = sum(c[d] for c, d in zip(counts, digits))
        search.found.add(g, chunk, rows, score[rows], changes, spare[rows])
        search.found = trim(search.found)
    elif search.fitting == 0 and valid.any():
        over = np.maximum(-spare, 0).astype(np.float64)
        if host_ram > 0:
            over += np.maximum(chunk.values("host_bytes") - host_ram, 0)
        over = np.where(valid, over, np.inf)
        row = int(np.argmin(over))
        if over[row] < search.miss_bytes:
            search.miss_bytes = float(over[row])
            search.closest = Found()
            search.closest.add(g, chunk, np.array([row]), score[[row]], np.zeros(1, np.int64), spare[[row]])


def trim(found: Found) -> Found:
    """The kept rows, down to the best one per distinct score once they grow past a few chunks' worth."""
    if len(found.score) < 8 * KEEP:
        return found
    out = Found()
    for i in found.best(KEEP):
        for name in ("grid", "index", "score", "changes", "spare", "outputs"):
            getattr(out, name).append(getattr(found, name)[i])
    return out


def run_search(spaces: list[Space], rec, model_key: str, gpu_key: str, rank_by: str) -> Search:
    """Every grid through the sweep kernel, chunk by chunk."""
    user = user_inputs(rec)
    search, kernel = Search(grids=[], user=user), None
    for g, space in enumerate(spaces):
        grid = plan_grid(space, rec, model_key, gpu_key)
        search.grids.append(grid)
        counts = change_counts(grid, user)
        previous, kernel = kernel, SweepKernel(grid, compiled=True)
        if previous is not None:
            kernel.adopt(previous)
        on_node = np.array([rec], dtype=rec.dtype).view(np.recarray)[0]
        on_node.n_gpus = space.n_gpus
        host_ram = int(host_ram_per_gpu(on_node))  # the GPU's share of its node's RAM (0: unknown)
        for start in range(0, grid.total, CHUNK_ROWS):
            chunk = kernel.evaluate(start, min(CHUNK_ROWS, grid.total - start))
            reduce_chunk(search, g, chunk, counts, space.n_gpus, rank_by, host_ram)
    return search


def decode_inputs(grid: Grid, index: int, user: dict) -> dict:
    """The inputs of configuration `index` of a plan grid: the user's, and each axis' value at its digit."""
    inputs = dict(user)
    for axis, radix in zip(reversed(grid.axes), reversed(grid.radices)):
        digit = index % radix
        index //= radix
        if axis.name not in ("model", "gpu"):
            for name, labels in axis.columns:
                inputs[name] = labels[digit]
    return inputs
