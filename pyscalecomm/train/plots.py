"""The sweep's plots (matplotlib, no display needed): speedup and efficiency
against workers, the per-step time breakdown (compute and exposed
communication), test accuracy against epoch and against training time, and
the staleness of parameter-server runs' gradients.
Returns the paths written; without matplotlib, says so and writes nothing."""

from __future__ import annotations

import os

from pyscalecomm.train.report import strategy_label


def _series_label(r: dict) -> str:
    c = r["config"]
    algo = "" if c["algo"] == "auto" else f":{c['algo']}"
    thr = "" if c["threads"] == 1 else f" x{c['threads']}thr"
    strategy = strategy_label(c)
    how = "" if strategy == "allreduce" else f" {strategy}"
    return f"{c['backend']}{algo} {c['compress']}{thr}{how}"


def _save(plt, fig, out_dir: str, name: str) -> str:
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: list[dict], out_dir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# plots skipped: matplotlib is not installed (pip install matplotlib)")
        return []
    paths = []
    series: dict[str, list[dict]] = {}
    for r in results:
        series.setdefault(_series_label(r), []).append(r)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    worlds = sorted({r["config"]["world"] for r in results})
    for name, runs in series.items():
        runs = sorted((r for r in runs if r["speedup"] is not None), key=lambda r: r["config"]["world"])
        if runs:
            ax1.plot([r["config"]["world"] for r in runs], [r["speedup"] for r in runs], "o-", label=name)
            ax2.plot(
                [r["config"]["world"] for r in runs], [100 * r["efficiency"] for r in runs], "o-", label=name
            )
    ax1.plot(worlds, worlds, "k:", label="linear")
    ax1.set(xlabel="workers (ranks)", ylabel="speedup T1/TN", title="Speedup")
    ax2.axhline(100, color="k", linestyle=":")
    ax2.set(xlabel="workers (ranks)", ylabel="efficiency %", title="Scaling efficiency")
    for ax in (ax1, ax2):
        ax.set_xticks(worlds)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    paths.append(_save(plt, fig, out_dir, "speedup.png"))

    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(results) + 2), 4))
    names = [f"{_series_label(r)}\nN={r['config']['world']}" for r in results]
    compute = [r["step_ms"] - r["exposed_comm_ms"] for r in results]
    comm = [r["exposed_comm_ms"] for r in results]
    ax.bar(range(len(results)), compute, label="compute (incl. hidden communication)")
    ax.bar(range(len(results)), comm, bottom=compute, label="exposed communication")
    ax.set_xticks(range(len(results)), names, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="ms per step", title="Where a step's time goes")
    ax.legend(fontsize=8)
    paths.append(_save(plt, fig, out_dir, "breakdown.png"))

    real = [r for r in results if r["final_acc"] is not None]
    if real:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for r in real:
            name = f"{_series_label(r)} N={r['config']['world']}"
            ep = r["epochs"]
            ax1.plot([e["epoch"] for e in ep], [e["acc"] for e in ep], ".-", label=name)
            ax2.plot([e["cum_time_s"] for e in ep], [e["acc"] for e in ep], ".-", label=name)
        ax1.set(xlabel="epoch", ylabel="test accuracy", title="Convergence per epoch")
        ax2.set(xlabel="training time (s)", ylabel="test accuracy", title="Accuracy against time")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
        ax1.legend(fontsize=6)
        paths.append(_save(plt, fig, out_dir, "accuracy.png"))

    stale = [r for r in results if r.get("staleness")]
    if stale:
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(stale)
        for i, r in enumerate(stale):
            counts = {int(k): v for k, v in r["staleness"]["counts"].items()}
            total = sum(counts.values()) or 1
            xs = sorted(counts)
            ax.bar(
                [x + i * width for x in xs],
                [100 * counts[x] / total for x in xs],
                width=width,
                label=f"{_series_label(r)} N={r['config']['world']}",
            )
        ax.set(
            xlabel="staleness (server versions between the read and the update)",
            ylabel="% of applied gradients",
            title="Parameter server: staleness of applied gradients",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        paths.append(_save(plt, fig, out_dir, "staleness.png"))

    predicted = [r for r in results if r.get("predicted")]
    if predicted:  # strategies side by side: step time as measured and as predicted, model state
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        xs = range(len(predicted))
        names = [f"{_series_label(r)}\nN={r['config']['world']}" for r in predicted]
        ax1.bar([x - 0.2 for x in xs], [r["step_ms"] for r in predicted], width=0.4, label="measured")
        ax1.bar(
            [x + 0.2 for x in xs],
            [1e3 * r["predicted"]["step_s"] for r in predicted],
            width=0.4,
            label="predicted",
        )
        ax1.set(ylabel="ms per step", title="Step time: measured and predicted")
        ax2.bar(xs, [r.get("state_mib") or 0 for r in predicted], color="tab:green")
        ax2.set(ylabel="MiB per rank", title="Model state (parameters, gradients, momentum)")
        for ax in (ax1, ax2):
            ax.set_xticks(list(xs), names, rotation=45, ha="right", fontsize=7)
            ax.grid(alpha=0.3, axis="y")
        ax1.legend(fontsize=8)
        paths.append(_save(plt, fig, out_dir, "strategies.png"))
    return paths
