"""What a bench run reports: `summarize` (one row per method and temperature from the records),
`format_table` (a rich table, derived columns starred with their formulas), `plot_summary` (PNG),
and the JSON's "fields" (`FIELDS`: measured, derived or predicted, with the formula).

The rows keep the key ``"runner"`` for the method's label, as committed result files have it.
"""

from __future__ import annotations

import os

from rich.table import Table

from .records import records_by_runner
from .spec import BASELINE, method_entry, parse_method

__all__ = ["summarize", "greedy_match", "first_divergence", "format_table", "table", "display_name",
           "plot_summary", "pyplot", "save_figure", "tree_budget_curves", "all_tokens_rate", "FIELDS", "COLUMNS",
           "NEAR_TIE"]


def first_divergence(tokens, reference) -> int | None:
    """The first index where two token lists differ (over their common length), or None."""
    return next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), None)


def summarize(results: dict, config) -> list[dict]:
    """One row per (method, temperature) among all records of the file (runs that resumed it
    with other methods or temperatures included), over the prompts done by both the method and
    target-only: block efficiency (tokens per target call), mean accepted length tau, decode
    tokens/s, speedup vs target-only (decode phase, same run), end-to-end speedup (prefill
    included), forwards per prompt, peak memory, and at T = 0 the greedy match rate vs
    target-only with each first divergence explained."""
    rows, grouped = [], records_by_runner(results["records"])  # (label, T) -> {task: record}
    labels = list(dict.fromkeys(label for label, _ in grouped))
    labels = [BASELINE] + [label for label in labels if label != BASELINE]
    specs = [parse_method(label, config.draft_length, config.num_paths) for label in labels]
    for T in sorted({T for _, T in grouped}):
        base = grouped.get((BASELINE, T), {})
        for spec in specs:
            done = grouped.get((spec.label, T), {})
            common = [t for t in done if t in base]
            if not common:
                continue
            rows.append(_summary_row(spec, float(T), done, base, common))
    return rows


def _rates(records, common):
    """(decode-phase tokens/s, end-to-end tokens/s) over the prompts `common`; the first is None
    when no token was emitted after the prompt-reading call (the peer can emit every token in its
    first call when max_new_tokens is small)."""
    decode_tokens = sum(records[t]["decode_tokens"] for t in common)
    return (decode_tokens / sum(records[t]["decode_s"] for t in common) if decode_tokens else None,
            sum(records[t]["new_tokens"] for t in common) / sum(records[t]["wall_s"] for t in common))


def _ratio(a, b):
    return a / b if a is not None and b else None


def all_tokens_rate(records, common):
    """new tokens / seconds after the prompt's prefill, all tokens counted: wall_s - prefill_only_s
    where the prompt's call emitted tokens, else the measured decode phase (a prefill emits none)."""
    seconds = sum(r["wall_s"] - r["prefill_only_s"] if "prefill_only_s" in r else r["decode_s"]
                  for r in (records[t] for t in common))
    return sum(records[t]["new_tokens"] for t in common) / seconds if seconds > 0 else None


def _summary_row(spec, T, done, base, common):
    tokens = sum(done[t]["new_tokens"] for t in common)
    (rate, rate_e2e), (base_rate, base_e2e) = _rates(done, common), _rates(base, common)
    iterations = sum(done[t]["accepted_count"] for t in common)
    calls = sum(done[t]["verify_calls"] for t in common)
    row = {"runner": spec.label, "temperature": T, "prompts": len(common), "tokens": tokens,
           "block_efficiency": _ratio(sum(done[t]["verify_tokens"] for t in common), calls),
           "mean_accepted": _ratio(sum(done[t]["accepted_sum"] for t in common), iterations),
           "tokens_per_s": rate, "tokens_per_s_end_to_end": rate_e2e,
           "speedup": _ratio(rate, base_rate), "speedup_end_to_end": rate_e2e / base_e2e,
           "tokens_per_s_all": all_tokens_rate(done, common),
           "speedup_all": _ratio(all_tokens_rate(done, common), all_tokens_rate(base, common)),
           "prefill_s": sum(done[t]["prefill_s"] for t in common) / len(common),
           "target_forwards": sum(done[t]["target_forwards"] for t in common) / len(common),
           "draft_forwards": sum(done[t]["draft_forwards"] for t in common) / len(common),
           "peak_memory_mb": max((done[t]["peak_memory_mb"] or 0.0) for t in common)}
    if any("predicted_sum" in done[t] for t in common):
        row["predicted_accepted"] = sum(done[t].get("predicted_sum", 0.0) for t in common) / max(iterations, 1)
        row["node_budget"] = spec.param("node_budget")
    if all("draft_rows" in done[t] for t in common):
        row["draft_rows"] = sum(done[t]["draft_rows"] for t in common) / len(common)
    if any("pool_hits" in done[t] for t in common):
        row["pool_hit_rate"] = (sum(done[t]["pool_hits"] for t in common)
                                / max(sum(done[t]["pool_lookups"] for t in common), 1))
    if T == 0 and spec.name != BASELINE:
        row.update(greedy_match(done, base, common))
    return row


#: Logit margin (top-1 minus top-2 of target-only's 1-row forward) at or below which a greedy
#: divergence counts as a near-tie: bf16 has 8 significant bits, so logits of magnitude 16-32 are
#: spaced 0.125 apart and a 1-row and a multi-row forward (other GEMM summation orders) can
#: swap two tokens within 2 such steps.
NEAR_TIE = 0.25


def greedy_match(done, base, common):
    """Greedy match rate vs target-only; each first divergence with the target-only 1-row
    forward's top-1/top-2 logit margin there and whether the method chose the runner-up."""
    divergences = []
    for t in common:
        i = first_divergence(done[t]["tokens"], base[t]["tokens"])
        if i is None:
            continue
        margins, runner_up = base[t].get("top2_margins"), base[t].get("runner_up_tokens")
        divergences.append({"task_id": t, "index": i, "token": done[t]["tokens"][i],
                            "target_only_token": base[t]["tokens"][i],
                            "top2_margin": margins[i] if margins else None,
                            "near_tie": bool(margins and margins[i] <= NEAR_TIE),
                            "chose_runner_up": bool(runner_up and runner_up[i] == done[t]["tokens"][i])})
    matched = [min((first_divergence(done[t]["tokens"], base[t]["tokens"]) or len(base[t]["tokens"])),
                   len(base[t]["tokens"])) / len(base[t]["tokens"]) for t in common]
    return {"greedy_match_rate": 1 - len(divergences) / len(common),
            "greedy_matched_fraction": sum(matched) / len(matched), "divergences": divergences}


COLUMNS = (("runner", "runner", "{}"), ("T", "temperature", "{:g}"), ("prompts", "prompts", "{}"),
           ("block eff.", "block_efficiency", "{:.2f}"), ("tau", "mean_accepted", "{:.2f}"),
           ("E[A] pred.", "predicted_accepted", "{:.2f}"),
           ("tok/s", "tokens_per_s", "{:.2f}"), ("speedup*", "speedup", "{:.2f}x"),
           ("all N*", "speedup_all", "{:.2f}x"),
           ("e2e*", "speedup_end_to_end", "{:.2f}x"), ("target fw", "target_forwards", "{:.1f}"),
           ("draft fw", "draft_forwards", "{:.1f}"), ("peak MB", "peak_memory_mb", "{:.0f}"),
           ("greedy match", "greedy_match_rate", "{:.0%}"))

#: Every summary column: measured in the run, or derived (with its formula), or predicted by a
#: model. Written into the JSON ("fields") and, for the derived ones, under the table.
FIELDS = {
    "tokens": "measured: tokens generated over the prompts (max_new_tokens each)",
    "prefill_s": "measured: seconds from the method's start to the end of the first forward of each model "
                 "(the forwards that read the prompt), mean per prompt",
    "tokens_per_s": "measured: tokens emitted in the decode phase / its seconds (the span after prefill_s; "
                    "the first target call, which reads the prompt and verifies the first draft, and the tokens "
                    "it emits fall in prefill_s; null when no "
                    "token is left for the decode phase)",
    "tokens_per_s_end_to_end": "measured: tokens / seconds of the whole span, prefill included",
    "speedup": "derived: tokens_per_s / target_only tokens_per_s (same run, same prompts)",
    "speedup_end_to_end": "derived: tokens_per_s_end_to_end / target_only tokens_per_s_end_to_end",
    "tokens_per_s_all": "derived: tokens / seconds after the prompt's prefill, every token counted: "
                        "wall_s - prefill_only_s, prefill_only_s = a prefill-only forward of the prompt by the "
                        "method's target (and draft) timed after its run; the measured decode phase for a "
                        "method with a separate prefill forward (it emits no token)",
    "speedup_all": "derived: tokens_per_s_all / target_only tokens_per_s_all (tokens_per_s_all: all tokens over "
                   "the seconds after the prefill, timed by a separate prefill-only forward)",
    "block_efficiency": "measured: tokens emitted by the target calls after the one that reads the prompt, "
                        "per such call (the same ratio for every method)",
    "mean_accepted": "measured: mean accepted draft tokens tau per verifying target call (the peer's from "
                     "forward hooks)",
    "predicted_accepted": "predicted: the draft's own E[A] of its trees, per verifying call",
    "target_forwards": "measured: target forwards per prompt, prefill included",
    "draft_forwards": "measured: draft forwards per prompt, prefill included",
    "draft_rows": "measured: draft token rows fed while drafting, per prompt",
    "peak_memory_mb": "measured: peak CUDA allocation or process RSS (sampled every 5 ms)",
    "pool_hit_rate": "measured: pool lookups that found a phrase / lookups",
    "greedy_match_rate": "measured: prompts whose T=0 tokens equal target_only's",
    "greedy_matched_fraction": "measured: mean fraction of tokens before the first divergence",
}


def display_name(label: str) -> str:
    """A method label as tables and plots show it: a method that simplifies its paper's says so
    (the registry entry's `note`: lookahead with one Jacobi window level, Ouroboros with one Jacobi
    level in the draft forward, a static EAGLE-style tree from fixed rank priors)."""
    entry = method_entry(label.partition(":")[0])
    return label if entry is None or not entry.note else f"{label} ({entry.note})"


def table(columns, summary: list[dict], title: str, caption: str | None = None):
    """A `rich.table.Table` of summary rows; columns: (header, key, format) triples, "-" where a
    row lacks the key; an optional caption under it."""
    out = Table(title=title, caption=caption)
    for header, _, _ in columns:
        out.add_column(header, justify="left" if header == "runner" else "right")
    for row in summary:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "-" for _, key, fmt in columns]
        out.add_row(*[display_name(c) if key == "runner" else c for c, (_, key, _) in zip(cells, columns)])
    return out


def format_table(summary: list[dict], title: str = "verispec bench"):
    """A `rich.table.Table` of the summary rows; derived columns are starred, with their formulas
    in the caption."""
    derived = [f"{header} {FIELDS[key][len('derived: '):]}" for header, key, _ in COLUMNS
               if FIELDS.get(key, "").startswith("derived")]
    return table(COLUMNS, summary, title, caption="derived: " + "; ".join(derived))


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing (plots are skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: str) -> str:
    """Write `fig` as a PNG at `path` (folders created), close it, return the path."""
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def tree_budget_curves(summary: list[dict]) -> dict:
    """{(tree method, T): [(node budget n, block efficiency, predicted E[A] + 1, prompts), ...]}
    sorted by n, for every tree method (one point when it was measured at one budget)."""
    curves: dict = {}
    for row in summary:
        if "node_budget" in row:
            curves.setdefault((row["runner"].partition(":")[0], row["temperature"]), []).append(
                (row["node_budget"], row["block_efficiency"], row["predicted_accepted"] + 1.0, row["prompts"]))
    return {key: sorted(points) for key, points in curves.items()}


def plot_summary(summary: list[dict], path: str) -> str | None:
    """Bar charts of speedup and block efficiency per method and temperature, plus (when a tree
    method ran) block efficiency vs node budget, measured (solid) and predicted by the draft
    (dashed: E[A] + 1) -> PNG path, or None when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return None
    temperatures = sorted({row["temperature"] for row in summary})
    labels = list(dict.fromkeys(row["runner"] for row in summary))
    curves = tree_budget_curves(summary)
    fig, axes = plt.subplots(1, 3 if curves else 2, figsize=(17 if curves else 11, 4))
    width = 0.8 / max(len(temperatures), 1)
    for j, T in enumerate(temperatures):
        by = {row["runner"]: row for row in summary if row["temperature"] == T}
        xs = [i + j * width for i in range(len(labels))]
        for ax, key in zip(axes, ("speedup", "block_efficiency")):
            ax.bar(xs, [(by[r].get(key) or 0) if r in by else 0 for r in labels], width, label=f"T={T:g}")
    for ax, label in zip(axes, ("decode speedup vs target-only", "tokens per target call")):
        ax.set_xticks([i + width * (len(temperatures) - 1) / 2 for i in range(len(labels))])
        ax.set_xticklabels([display_name(r) for r in labels], rotation=30, ha="right")
        ax.set_title(label)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.legend()
    if curves:
        ax = axes[2]
        for (name, T), points in sorted(curves.items()):
            line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                            label=f"{display_name(name)} T={T:g}")
            ax.plot([p[0] for p in points], [p[2] for p in points], linestyle="--", color=line.get_color())
        ax.set_xscale("log")
        ax.set_xlabel("node budget n")
        ax.set_title("trees: block efficiency vs n (dashed: draft's E[A] + 1)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
