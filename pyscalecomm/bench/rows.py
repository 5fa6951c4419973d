"""The benchmark's results: one :class:`Row` per measurement, and its renderers.

A measurement is one collective, size, implementation and placement (in or
out of place). Renderers: :class:`Table` (nccl-tests' layout: out-of-place
and in-place side by side, one line per size and implementation) and
:func:`write_jsonl` (one JSON object per row, every field). :func:`plot_busbw`
draws busbw against size from the same rows.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

# Rows whose rounds spread wider than this share of their median are marked noisy.
NOISY_SPREAD = 0.25


def spread_of(rounds: list[float], median: float) -> float:
    """The range of the rounds' times as a share of their median (0 for one round)."""
    if len(rounds) < 2 or median <= 0:
        return 0.0
    return (max(rounds) - min(rounds)) / median


def noisy_note(spread: float) -> str:
    """What a table row says of its spread: "noisy (±N%)" when wide, else ""."""
    return f"noisy (±{50 * spread:.0f}%)" if spread > NOISY_SPREAD else ""


@dataclass
class Row:
    """One measurement, as the JSON lines carry it (units in the names)."""

    collective: str
    implementation: str  # the table's label: scalecomm, scalecomm:<algo>, gloo, mpi, nccl, scalecomm:<codec>
    backend: str  # scalecomm | compress | gloo | mpi | nccl
    algorithm: str  # what was asked (auto: see the table's auto note for what ran)
    world_size: int
    bytes: int
    count: int
    dtype: str
    op: str  # the reduction; "none" where the collective has none
    root: int  # -1 where the collective has none
    inplace: bool
    time_us: float  # the statistic named by time_stat, median round
    time_us_min: float  # across ranks, same round
    time_us_avg: float
    time_us_max: float
    time_stat: str
    busbw_factor: float
    iters: int
    warmup_iters: int
    rounds: int
    cpu_us: float | None = None  # CPU time per call of all of a rank's threads, mean over ranks, same round
    time_us_rounds: list[float] = field(default_factory=list)  # the statistic of every round
    wrong: int | None = None  # elements off the closed form (None: lossy, see relerr; -1: not checked)
    codec: str | None = None
    relerr: float | None = None  # lossy rows: ||result - exact|| / ||exact||
    wire_bytes: int | None = None  # bytes one rank sends (compressed rows: the codec's)
    transport: str | None = None  # scalecomm rows: the group's transport setting
    segment_bytes: int | None = None
    model: dict | None = None  # scalecomm rows: the cost model's probed parameters
    model_alpha: float | None = None
    model_beta: float | None = None
    window_bytes: int | None = None
    ran: str | None = None  # auto rows: what auto's tuner ran for this size after the rounds

    @property
    def seconds(self) -> float:
        return self.time_us * 1e-6

    @property
    def spread(self) -> float:
        """The range of the rounds' times as a share of this row's (0 for one round)."""
        return spread_of(self.time_us_rounds, self.time_us)

    @property
    def algbw_GBps(self) -> float:
        return self.bytes / self.seconds / 1e9

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * self.busbw_factor

    @property
    def lossy(self) -> bool:
        return self.backend == "compress"

    def record(self) -> dict:
        """The JSON object: every field, and the bandwidths."""
        return {
            **dataclasses.asdict(self),
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
            "spread": self.spread,
        }


def write_jsonl(path: str, rows: list) -> None:
    """Appends one JSON line per row (a :class:`Row`, or a record as a dict) to ``path``."""
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r.record() if isinstance(r, Row) else r) + "\n")


class Table:
    """nccl-tests' table, written line by line through ``out`` (a print)."""

    def __init__(self, out):
        self.out = out
        self.width = 12
        self._bw: dict[str, list[float]] = {}

    def header(self, collective: str, factor: float, labels: list[str], baseline: str | None) -> None:
        self.width = max(12, *(len(x) for x in labels))
        self._bw = {x: [] for x in labels}
        w = self.width
        self.out(f"#\n# {collective}: busbw = algbw x {factor:.3f}")
        self.out(
            f"# {'size':>10} {'count':>11} {'type':>8} {'redop':>6} {'root':>4} {'implementation':>{w}}"
            f" | {'out-of-place':^46} | {'in-place':^46} | {'busbw/' + (baseline or '-'):>12} {'':<16}"
        )
        self.out(
            f"# {'(B)':>10} {'(elements)':>11} {'':>8} {'':>6} {'':>4} {'':>{w}}"
            + f" | {'time(us)':>9} {'±%':>4} {'cpu(us)':>7} {'algbw':>7} {'busbw':>7} {'#wrong':>6}" * 2
            + f" | {'':>12} {'winner':<16}"
        )

    def line(self, label: str, placed: dict[bool, Row | None], shape: Row, ratio: str, note: str) -> None:
        """One size and implementation: its out-of-place and in-place rows (None: n/a)."""
        text = f"  {shape.bytes:>10} {shape.count:>11} {shape.dtype:>8} {shape.op:>6} {shape.root:>4}"
        text += f" {label:>{self.width}}"
        for ip in (False, True):
            r = placed.get(ip)
            if r is None:
                text += f" | {'n/a':>9} {'':>4} {'':>7} {'':>7} {'':>7} {'':>6}"
                continue
            self._bw[label].append(r.busbw_GBps)
            shown = f"~{r.relerr:.3f}" if r.lossy else r.wrong
            cpu = f"{r.cpu_us:.1f}" if r.cpu_us is not None else ""
            text += f" | {r.time_us:>9.1f} {50 * r.spread:>4.0f} {cpu:>7}"
            text += f" {r.algbw_GBps:>7.3f} {r.busbw_GBps:>7.3f} {shown:>6}"
        self.out(text + f" | {ratio:>12} {note:<16}", flush=True)

    def footer(self, collective: str) -> None:
        """nccl-tests' "Avg bus bandwidth" per implementation."""
        for label, bws in self._bw.items():
            if bws:
                self.out(f"# Avg bus bandwidth    : {sum(bws) / len(bws):.3f} GB/s  ({collective}, {label})")

    def summary(self, wrong: int) -> None:
        self.out("#\n# Out of bounds values : " + (f"{wrong} FAILED" if wrong else "0 OK"))


def plot_busbw(rows: list[Row], path: str, n: int) -> None:
    """busbw against size, one line per implementation (in place where measured), one panel per collective."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = list(dict.fromkeys(r.collective for r in rows))
    labels = list(dict.fromkeys(r.implementation for r in rows))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {lab: palette[i % len(palette)] for i, lab in enumerate(labels)}  # one colour per implementation
    fig, axes = plt.subplots(len(colls), 1, figsize=(8, 3.6 * len(colls)), squeeze=False)
    for ax, coll in zip(axes[:, 0], colls, strict=True):
        mine = [r for r in rows if r.collective == coll]
        for label in dict.fromkeys(r.implementation for r in mine):
            series = [r for r in mine if r.implementation == label]
            series = sorted([r for r in series if r.inplace] or series, key=lambda r: r.bytes)
            ax.plot(
                [r.bytes for r in series],
                [r.busbw_GBps for r in series],
                marker="o",
                label=label,
                color=color[label],
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{coll}, {n} ranks")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
