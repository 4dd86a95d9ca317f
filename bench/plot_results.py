#!/usr/bin/env python3
"""Draws the README's performance figures from committed records only (bench/results/, and
bench/reference/flashmla_h200.csv), into docs/figures/*.png.

Needs matplotlib, which neither the build nor the tests use. Install it outside the repository:
    python3 -m venv /tmp/venv-plot && /tmp/venv-plot/bin/pip install matplotlib
    /tmp/venv-plot/bin/python bench/plot_results.py           # writes docs/figures/*.png
`--check` only reads and parses every input (no matplotlib needed) and prints what it found.

Figures (each titled with its device and date, its record path in a caption line):
  dense-bf16-h200.png   FlashMLA / mlakit (sm90's fastest tactic) over FlashMLA's reference grid
  fp8-h200-h100.png     fp8 cache: mlakit fp8 q and bf16 q against FlashMLA's bf16 kernel
  sparse-v32-h200.png   V3.2 sparse top-k 2048 against FlashMLA's sparse kernel
Ratio > 1: mlakit is faster."""
import argparse
import csv
import glob
import json
import math
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DENSE = "bench/results/2026-11-24-h200-recorded-grid"
FP8 = "bench/results/2026-11-27-h200-h100-fp8"
# The H200's later grid of both fp8 q kinds under `auto` (the splits of a bf16 q).
FP8_AUTO = "bench/results/2026-11-29-h200-fp8-qsplit-narrow/call6"
SPARSE = "bench/results/2026-11-27-h200-sparse"
REFERENCE = "bench/reference/flashmla_h200.csv"
OUT = "docs/figures"


def path(rel):
    return os.path.join(ROOT, rel)


def markdown_tables(readme):
    """{section heading: [rows as dicts]} for each '## ' section's first table."""
    tables, section, header = {}, None, None
    for line in open(path(readme)):
        line = line.rstrip("\n")
        if line.startswith("## "):
            section, header = line[3:].strip(), None
        elif line.startswith("|") and section is not None:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set("-: "):
                tables.setdefault(section, []).append(dict(zip(header, cells)))
        elif header is not None:
            header, section = None, None  # only the first table of a section
    return tables


def best_times(paths, keep=lambda r: True):
    """(h_q, s_q, batch, seq_len, var) -> the fastest time_us over the tactics in the files."""
    best = {}
    for p in paths:
        for r in json.load(open(path(p)))["results"]:
            if r["time_us"] <= 0 or not keep(r):
                continue
            key = (r["h_q"], r["s_q"], r["batch"], r["seq_len"], int(r["var"]))
            best[key] = min(best.get(key, math.inf), r["time_us"])
    return best


def row_key(r, length="L"):
    return (int(r["h_q"]), int(r["s_q"]), int(r["batch"]), int(r[length]), int(r.get("var", 0)))


def load_dense():
    """mlakit sm90 (fastest tactic) on the recorded grid, FlashMLA's reference CSV (the times the
    record scores against, measured 2026-11-21) and FlashMLA settled (2026-11-27, the FlashMLA
    column of the fp8 record's H200 tables)."""
    runs = sorted(glob.glob(path(DENSE + "/run/grid-h*.json"))
                  + glob.glob(path(DENSE + "/run/var-*.json")))
    mlakit = best_times([os.path.relpath(p, ROOT) for p in runs], lambda r: r["backend"] == "sm90")
    with open(path(REFERENCE)) as f:
        ref = {(int(r["h_q"]), int(r["s_q"]), int(r["batch"]), int(r["seq_len"]), int(r["var"])):
               float(r["time_us"]) for r in csv.DictReader(l for l in f if not l.startswith("#"))}
    settled = {}
    for section, rows in markdown_tables(FP8 + "/README.md").items():
        if section.endswith("H200"):
            for r in rows:
                if r.get("FlashMLA bf16 (us)", "-") != "-":
                    settled[row_key(r)] = float(r["FlashMLA bf16 (us)"])
    return mlakit, ref, settled


def load_fp8():
    """{device: {q dtype: {key: mlakit us}}} and {device: {key: FlashMLA bf16 us}}."""
    mlakit, flashmla = {}, {}
    for device, folder in (("H200", "h200"), ("H100", "h100")):
        for q in ("fp8", "bf16"):
            files = sorted(glob.glob(path(f"{FP8}/{folder}/*{q}q_*.json")))
            if not files:
                raise FileNotFoundError(f"{FP8}/{folder}/*{q}q_*.json")
            mlakit.setdefault(device, {})[q] = best_times([os.path.relpath(p, ROOT) for p in files])
    mlakit["H200"]["bf16 auto"] = best_times([f"{FP8_AUTO}/grid_bf16.json"])
    for section, rows in markdown_tables(FP8 + "/README.md").items():
        m = re.match(r"(fp8|bf16) q.*, (H200|H100)$", section)
        if m:
            for r in rows:
                if r["FlashMLA bf16 (us)"] != "-":
                    flashmla.setdefault(m.group(2), {})[row_key(r)] = float(r["FlashMLA bf16 (us)"])
    return mlakit, flashmla


def load_sparse():
    """[(h_q, s_q, batch, FlashMLA us, mlakit us)]: FlashMLA from the record's README table,
    mlakit (fastest over the file's rows) from v32.json."""
    ours = {}
    for r in json.load(open(path(SPARSE + "/v32.json")))["results"]:
        if r.get("topk") == 2048 and r["time_us"] > 0:
            key = (r["h_q"], r["s_q"], r["batch"])
            ours[key] = min(ours.get(key, math.inf), r["time_us"])
    rows = []
    for section, table in markdown_tables(SPARSE + "/README.md").items():
        if "against FlashMLA" in section:
            for r in table:
                key = (int(r["h_q"]), int(r["s_q"]), int(r["batch"]))
                rows.append(key + (float(r["FlashMLA (us)"]), ours[key]))
    if not rows:
        raise ValueError(f"{SPARSE}/README.md: no table of FlashMLA's times")
    return rows


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def case_label(key):
    _, _, b, L, var = key
    return f"b{b} L{L // 1024}K" + (" var" if var else "")


def check():
    mlakit, ref, settled = load_dense()
    common = [k for k in ref if k in mlakit]
    print(f"dense: {len(mlakit)} mlakit rows, {len(ref)} reference rows, {len(common)} in both, "
          f"geomean FlashMLA / sm90 {geomean([ref[k] / mlakit[k] for k in common]):.3f}; "
          f"{sum(k in mlakit for k in settled)} rows with FlashMLA settled")
    fp8, fmla = load_fp8()
    for device in fp8:
        for q, times in fp8[device].items():
            both = [k for k in fmla.get(device, {}) if k in times]
            print(f"fp8 {device} {q} q: {len(times)} rows, {len(both)} with FlashMLA, geomean "
                  f"{geomean([fmla[device][k] / times[k] for k in both]):.2f}")
    sparse = load_sparse()
    print(f"sparse: {len(sparse)} rows, geomean FlashMLA / mlakit "
          f"{geomean([f / m for *_, f, m in sparse]):.2f}")
    print("all inputs present and parsed")


def finish(fig, plt, name, caption):
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 170)), fontsize=7, color="0.3",
             ha="left", va="bottom")
    os.makedirs(path(OUT), exist_ok=True)
    out = path(f"{OUT}/{name}")
    fig.savefig(out, dpi=80)
    plt.close(fig)
    print(f"{os.path.relpath(out, ROOT)}: {os.path.getsize(out) // 1024} KB")


def ratio_panel(ax, keys, series, title):
    """series: [(label, {key: ratio}, style)] drawn over the same x cases."""
    x = range(len(keys))
    for label, ratios, style in series:
        xs = [i for i, k in enumerate(keys) if k in ratios]
        ax.plot(xs, [ratios[keys[i]] for i in xs], linestyle="none", label=label, **style)
    ax.axhline(1.0, color="0.4", linewidth=0.8)
    ax.set_xticks(list(x))
    ax.set_xticklabels([case_label(k) for k in keys], rotation=60, ha="right", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def plot_dense(plt):
    mlakit, ref, settled = load_dense()
    fig, axes = plt.subplots(3, 2, figsize=(11, 10), sharey=True)
    for row, h_q in enumerate((16, 64, 128)):
        for col, s_q in enumerate((1, 2)):
            keys = sorted(k for k in ref if k[:2] == (h_q, s_q) and k in mlakit)
            keys.sort(key=lambda k: (k[4], k[2], k[3]))
            vs_ref = {k: ref[k] / mlakit[k] for k in keys}
            vs_settled = {k: settled[k] / mlakit[k] for k in keys if k in settled}
            ax = axes[row][col]
            title = f"h_q {h_q}, s_q {s_q}: geomean {geomean(list(vs_ref.values())):.2f}"
            if vs_settled:
                title += (f" (settled FlashMLA, {len(vs_settled)} rows: "
                          f"{geomean(list(vs_settled.values())):.2f})")
            ratio_panel(ax, keys, [
                ("vs FlashMLA, reference CSV (2026-11-21)", vs_ref,
                 dict(marker="o", color="tab:blue")),
                ("vs FlashMLA settled (2026-11-27)", vs_settled,
                 dict(marker="s", markerfacecolor="none", color="tab:orange"))], title)
            if col == 0:
                ax.set_ylabel("FlashMLA time / mlakit time")
    axes[0][1].legend(fontsize=8, loc="upper right")
    fig.suptitle("Dense bf16 decode, NVIDIA H200, mlakit 2026-11-24 (sm90, fastest tactic, settled)"
                 " vs FlashMLA\nx: batch x seq_len cases of FlashMLA's reference grid; > 1: mlakit"
                 " faster", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    finish(fig, plt, "dense-bf16-h200.png",
           f"mlakit: {DENSE}/run/ (c45155b); FlashMLA: {REFERENCE}, and the FlashMLA column of "
           f"{FP8}/README.md (settled, 9241ae3). auto is not in this record.")


def plot_fp8(plt):
    mlakit, fmla = load_fp8()
    fig, axes = plt.subplots(2, 3, figsize=(13, 8), sharey=True)
    for row, device in enumerate(("H200", "H100")):
        for col, h_q in enumerate((16, 64, 128)):
            keys = sorted((k for k in fmla[device] if k[0] == h_q),
                          key=lambda k: (k[4], k[1], k[2], k[3]))
            series, parts = [], []
            for q, label, style in (
                    ("fp8", "mlakit fp8 q", dict(marker="o", color="tab:green")),
                    ("bf16", "mlakit bf16 q", dict(marker="^", color="tab:purple")),
                    ("bf16 auto", "mlakit bf16 q, q split (2026-11-29, auto)",
                     dict(marker="v", markerfacecolor="none", color="tab:red"))):
                if q not in mlakit[device]:
                    continue
                ratios = {k: fmla[device][k] / mlakit[device][q][k]
                          for k in keys if k in mlakit[device][q]}
                series.append((label, ratios, style))
                parts.append(f"{q} q {geomean(list(ratios.values())):.2f}")
            ax = axes[row][col]
            ratio_panel(ax, keys, series, f"{device}, h_q {h_q}: geomean " + ", ".join(parts))
            ax.set_xticklabels([("s2 " if k[1] == 2 else "") + case_label(k) for k in keys],
                               rotation=60, ha="right", fontsize=7)
            ax.set_yscale("log", base=2)
            ax.set_yticks([0.5, 0.75, 1, 1.5, 2])
            ax.set_yticklabels(["0.5", "0.75", "1", "1.5", "2"])
            if col == 0:
                ax.set_ylabel("FlashMLA bf16 time / mlakit time")
    axes[0][0].legend(fontsize=8, loc="upper right")
    fig.suptitle("fp8 (e4m3) KV cache, NVIDIA H200 and H100, 2026-11-27 (fastest tactic; H200 bf16"
                 " q also 2026-11-29, auto) vs FlashMLA's bf16 kernel on a bf16 cache\nx: batch x"
                 " seq_len (s_q 1 unless marked s2); > 1: mlakit faster", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    finish(fig, plt, "fp8-h200-h100.png",
           f"mlakit: {FP8}/h200, h100/*.json and {FP8_AUTO}/grid_bf16.json; FlashMLA (settled,"
           f" 9241ae3): the tables of {FP8}/README.md")


def plot_sparse(plt):
    rows = load_sparse()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, h_q in zip(axes, (64, 128)):
        width = 0.38
        for j, (s_q, color) in enumerate(((1, "tab:blue"), (2, "tab:orange"))):
            sel = sorted(r for r in rows if r[0] == h_q and r[1] == s_q)
            xs = [i + (j - 0.5) * width for i in range(len(sel))]
            ax.bar(xs, [f / m for *_, f, m in sel], width, color=color, label=f"s_q {s_q}")
            ax.set_xticks(range(len(sel)))
            ax.set_xticklabels([f"b{r[2]}" for r in sel])
        ax.axhline(1.0, color="0.4", linewidth=0.8)
        ax.set_title(f"h_q {h_q}", fontsize=9)
        ax.set_xlabel("batch (8192 cached tokens a request)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("FlashMLA time / mlakit time")
    axes[0].legend(fontsize=8)
    g = geomean([f / m for *_, f, m in rows])
    fig.suptitle(f"Sparse top-k decode (V3.2 cache, bf16 q, topk 2048), NVIDIA H200, 2026-11-27:"
                 f" mlakit vs FlashMLA's sparse kernel\ngeomean {g:.2f}; > 1: mlakit faster",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    finish(fig, plt, "sparse-v32-h200.png",
           f"mlakit: {SPARSE}/v32.json; FlashMLA (settled): the table of {SPARSE}/README.md")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only read and parse every input; matplotlib not needed")
    args = parser.parse_args(argv)
    if args.check:
        check()
        return 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_results.py needs matplotlib (not a dependency of mlakit): "
                 "python3 -m venv /tmp/venv-plot && /tmp/venv-plot/bin/pip install matplotlib, "
                 "then run it with /tmp/venv-plot/bin/python")
    plot_dense(plt)
    plot_fp8(plt)
    plot_sparse(plt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
