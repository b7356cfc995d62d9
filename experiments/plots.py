"""PNG figures for experiments/run.py. Each function takes the records it also writes as CSV."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tide_dspy.methods import floor_methods  # noqa: E402

COMPONENTS = ("retrieval", "identification", "resolution")


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


MARKERS = "osD^v<>"
LINESTYLES = ("-", "--", ":", "-.")


def _lines(records, x, ys, group, path, xlabel, ylabel, title):
    """Rates in [0, 1] against x, one line per (group, y), with a band for each point's 95% interval where the
    records give one (`<y>_ci_low`, `<y>_ci_high`). Markers and dashes differ, so equal lines stay visible; the
    chance floors are grey."""
    fig, ax = plt.subplots(figsize=(6, 4))
    series = defaultdict(list)
    for r in records:
        series[r[group]].append(r)
    n = 0
    for name, rows in series.items():
        rows.sort(key=lambda r: r[x])
        for y in ys:
            vals = [(r[x], r[y]) for r in rows if r[y] is not None]
            if vals:
                floor = name in FLOOR_METHODS
                line, = ax.plot(*zip(*vals), marker=MARKERS[n % len(MARKERS)],
                                linestyle=LINESTYLES[n % len(LINESTYLES)], markersize=8 - 1.5 * (n % 3),
                                label=f"{name} {y}" if len(ys) > 1 else name,
                                **({"color": "grey", "alpha": 0.6} if floor else {}))
                band = [(r[x], r[f"{y}_ci_low"], r[f"{y}_ci_high"]) for r in rows
                        if r[y] is not None and r.get(f"{y}_ci_low") is not None]
                if band:
                    ax.fill_between(*zip(*band), color=line.get_color(), alpha=0.12, linewidth=0)
                n += 1
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title + "\n(bands: 95% bootstrap interval over instances)",
           ylim=(-0.02, 1.02))
    ax.set_xticks(sorted({r[x] for r in records}))
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


# The chance floors (tide_dspy.methods), hatched so they read as a reference: none calls a model.
FLOOR_METHODS = tuple(floor_methods())


def higher_floor(records) -> tuple[str, float]:
    """The chance floor with the highest retrieval F1 among one run's records, and that F1 (a missing one is 0)."""
    floors = {r["method"]: r["retrieval_f1"] or 0.0 for r in records if r["method"] in FLOOR_METHODS}
    return max(floors.items(), key=lambda kv: kv[1])


def interval_errors(records, key: str) -> list[list[float]]:
    """matplotlib's asymmetric yerr for each record's `key`: the distance to its 95% interval's ends (0 where a
    record has no interval)."""
    low = [(r[key] or 0) - r[f"{key}_ci_low"] if r.get(f"{key}_ci_low") is not None else 0 for r in records]
    high = [r[f"{key}_ci_high"] - (r[key] or 0) if r.get(f"{key}_ci_high") is not None else 0 for r in records]
    return [low, high]


def table1(records, path: Path, title: str) -> None:
    """Coverage and F1 of each component per method: bars the mean over instances, whiskers the 95% bootstrap
    interval over instances (experiments/tables.py)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    methods = [r["method"] for r in records]
    for ax, c in zip(axes, COMPONENTS):
        for j, kind in enumerate(("coverage", "f1")):
            vals = [r[f"{c}_{kind}"] or 0 for r in records]
            xs = [i + (j - 0.5) * 0.38 for i in range(len(methods))]
            bars = ax.bar(xs, vals, width=0.38, yerr=interval_errors(records, f"{c}_{kind}"), capsize=3,
                          label=kind, color=f"C{j}")
            for bar, m in zip(bars, methods):
                if m in FLOOR_METHODS:
                    bar.set_hatch("//")
                    bar.set_alpha(0.55)
            ax.bar_label(bars, fmt="%.1f", fontsize=8)
        unjudged = all(r[f"{c}_f1"] is None for r in records)
        ax.set_title(c + (" (not judged)" if unjudged else ""))
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    top = max(max(r[f"{c}_{kind}"] or 0, r.get(f"{c}_{kind}_ci_high") or 0)
              for r in records for c in COMPONENTS for kind in ("coverage", "f1"))
    axes[0].set_ylim(0, max(10.0, 1.2 * top))
    axes[0].set_ylabel("percent")
    axes[0].legend(title="hatched: chance floors", title_fontsize=8)
    fig.suptitle(title + "\nwhiskers: 95% bootstrap interval over instances")
    _save(fig, path)


def steps(records, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.4
    for j, method in enumerate(sorted({r["method"] for r in records})):
        rows = sorted((r for r in records if r["method"] == method), key=lambda r: r["step"])
        xs = [r["step"] + (j - 0.5) * width for r in rows]
        ax.bar(xs, [r["new"] for r in rows], width=width, label=f"{method} new")
        ax.bar(xs, [r["rediscovered"] for r in rows], width=width, bottom=[r["new"] for r in rows],
               label=f"{method} re-discovered", alpha=0.5)
    ax.set(xlabel="step", ylabel="findings per instance", title="New vs re-discovered findings per step")
    ax.set_xticks(sorted({r["step"] for r in records}))
    ax.set_ylim(0, 1.4 * max([r["new"] + r["rediscovered"] for r in records] + [0.5]))  # room for the legend
    ax.legend(ncol=2, fontsize=8, loc="upper right")
    _save(fig, path)


def budget(records, path: Path) -> None:
    _lines(records, "budget", ["f1"], "method", path, "call budget k", "retrieval F1", "F1 against the call budget")


def rounds(records, path: Path) -> None:
    _lines(records, "round", ["coverage", "precision"], "method", path, "round", "retrieval",
           "Per-round retrieval coverage and precision")


def transfer(records, path: Path) -> None:
    """Table 3's grid: retrieval coverage (percent) of TIDE, inference backbone x template source, each cell with
    its 95% bootstrap interval over instances."""
    rows = sorted({r["inference"] for r in records})
    cols = sorted({r["templates_from"] for r in records})
    by_cell = {(r["inference"], r["templates_from"]): r for r in records}
    grid = [[(by_cell.get((i, s)) or {}).get("retrieval_coverage") or 0 for s in cols] for i in rows]
    fig, ax = plt.subplots(figsize=(1.8 + 1.8 * len(cols), 1.5 + 1.0 * len(rows)))
    im = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    for y, i in enumerate(rows):
        for x, s in enumerate(cols):
            r = by_cell.get((i, s)) or {}
            low, high = r.get("retrieval_coverage_ci_low"), r.get("retrieval_coverage_ci_high")
            interval = "" if low is None else f"\n[{low:.1f}, {high:.1f}]"
            ax.text(x, y, f"{grid[y][x]:.1f}{interval}", ha="center", va="center", color="w", fontsize=8)
    ax.set(xlabel="templates from", ylabel="inference backbone", title="Template transfer (retrieval coverage, %)")
    fig.colorbar(im)
    _save(fig, path)


def citations(records, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    for backbone in sorted({r["backbone"] for r in records}):
        rows = [r for r in records if r["backbone"] == backbone][:20]
        ax.bar([r["template"] for r in rows], [r["citations"] for r in rows], label=backbone, alpha=0.7)
    ax.tick_params(axis="x", rotation=70)
    ax.set(ylabel="citations", title="Template citation frequency")
    ax.legend()
    _save(fig, path)


def poolsize(records, path: Path) -> None:
    _lines(records, "pool_size", ["retrieval_f1"], "method", path, "template pool size", "retrieval F1",
           "F1 against template pool size")


def _short_id(instance_id: str) -> str:
    """`pylint-dev__pylint__multi-05` -> `pylint/multi-05`; workspace ids are cut to fit."""
    parts = instance_id.split("__")
    return "/".join(parts[-2:]) if len(parts) > 1 else instance_id.removeprefix("ws-")[:20]


def per_instance(records, path: Path) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = range(len(records))
    a.bar(xs, [r["findings"] for r in records], label="findings")
    a.plot(xs, [r["gold_problems"] for r in records], "k_", markersize=20, mew=2, label="gold problems")
    a.set_xticks(xs, [_short_id(r["instance_id"]) for r in records], rotation=30, ha="right", fontsize=8)
    top = max([r["findings"] for r in records] + [r["gold_problems"] for r in records] + [1])
    a.set_ylim(0, 1.3 * top)
    a.yaxis.get_major_locator().set_params(integer=True)
    a.set(ylabel="count", title="Discovered problems per instance")
    a.legend(loc="upper right", fontsize=8)
    pts = [(r["gold_problems"], r["retrieval_coverage"]) for r in records if r["retrieval_coverage"] is not None]
    if pts:
        b.scatter(*zip(*pts))
        b.set_xticks(sorted({x for x, _ in pts}))
    b.set(xlabel="gold problems in instance", ylabel="retrieval coverage", ylim=(-0.02, 1.02),
          title="Coverage by number of gold problems")
    _save(fig, path)


def compare(variants: dict[str, list[dict]], path: Path, title: str, goal: float) -> None:
    """Retrieval F1 of every method in each run folder, the floors hatched, and a tick at `goal` x the highest floor
    (none for goal 0). Where a run holds scan recall@focus, a second panel shows it for the same bars."""
    recall = any(r.get("scan_recall") is not None for records in variants.values() for r in records)
    width_in = max(6, 2.2 * len(variants))
    fig, axes = plt.subplots(1, 2 if recall else 1, figsize=(2 * width_in if recall else width_in, 4.2), squeeze=False)
    methods = list(dict.fromkeys(r["method"] for records in variants.values() for r in records))
    width = 0.8 / len(methods)
    panels = [("retrieval_f1", 1.0, "retrieval F1 (percent)")] + ([("scan_recall", 100.0, "recall@focus (percent)")]
                                                                 if recall else [])
    for ax, (key, scale, ylabel) in zip(axes[0], panels):
        for j, method in enumerate(methods):
            xs, vals = [], []
            for i, records in enumerate(variants.values()):
                row = next((r for r in records if r["method"] == method), None)
                if row is not None and (key == "retrieval_f1" or row.get(key) is not None):
                    xs.append(i + (j - (len(methods) - 1) / 2) * width)
                    vals.append(scale * (row.get(key) or 0.0))
            bars = ax.bar(xs, vals, width=width, label=method, color=f"C{j}",
                          hatch="//" if method in FLOOR_METHODS else None,
                          alpha=0.55 if method in FLOOR_METHODS else 1)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(variants)), list(variants), rotation=15, ha="right")
        ax.set(ylabel=ylabel)
    if goal:
        for i, records in enumerate(variants.values()):
            axes[0][0].hlines(goal * higher_floor(records)[1], i - 0.45, i + 0.45, colors="k", linestyles="--",
                              linewidth=1)
    axes[0][0].set_title(title + (f"\ndashed: {goal}x the highest chance floor" if goal else ""))
    if recall:
        axes[0][1].set_title("share of gold evidence in the first focus artifacts\n(floors: the first they cite)")
    handles, labels = axes[0][0].get_legend_handles_labels()  # every method has a bar there
    axes[0][-1].legend(handles, labels, fontsize=8, title="hatched: chance floors", title_fontsize=8,
                       loc="upper left", bbox_to_anchor=(1, 1))
    _save(fig, path)
