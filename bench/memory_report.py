"""The tables :mod:`bench.bench_memory` prints (``make bench`` and its own ``main``)."""

from __future__ import annotations

from typing import Any

from bench.bench_worker import BEFORE_MEMORY
from signals.core.retention import DEFAULT_RETAIN_SIGNALS

__all__ = ("ACTIVE_SHARE", "KINDS", "LISTPACK_VALUE", "report")

#: The share of users who wrote in the last day in the projected population: their lanes
#: are active (default retention), the others' idle (compacted).
ACTIVE_SHARE = 0.1
KINDS = ("doc", "trk", "sig", "snaps", "thread")
#: The Redis setting deploy/redis.conf raises: a hash whose values are all at most this
#: long (and that has at most hash-max-listpack-entries fields) is one listpack.
LISTPACK_VALUE = 4096


def _kind_row(name: str, text: float, lane: dict[str, Any], scope: str) -> str:
    table = lane["per_kind"][scope]
    cells = " | ".join(f"{table[k]:,.0f}" if k in table else "-" for k in KINDS)
    per_signal = table["sig"] / max(lane["signals"][scope], 1)
    return (f"| {name} | {text:,.0f} | {lane['signals'][scope]:.1f} | {per_signal:,.0f} | {cells} | "
            f"{sum(lane['partition'].values()):,.0f} | {lane['per_lane'][scope]:,.0f} |")


def report(r: dict[str, Any]) -> list[str]:
    """The result as Markdown lines (``make bench`` and ``main``)."""
    now, before = r["now"], r["before"]
    out = ["| lane, run | text B | signals held | sig B per signal | " + " | ".join(KINDS)
           + " | partition keys (share) | bytes per lane |",
           "|---|---:|---:|---:|" + "---:|" * len(KINDS) + "---:|---:|"]
    for scope, name in (("profile", "Markdown profile"), ("plan", "JSON plan")):
        text = now["active"]["text"][scope]
        if before is not None:
            out.append(_kind_row(f"{name}, before (baseline)", text, before["active"], scope))
        out.append(_kind_row(f"{name}, active", text, now["active"], scope))
        out.append(_kind_row(f"{name}, idle (compacted)", text, now["idle"], scope))
    out += ["", "| per lane | text B | active at default retention (x text; target <= 12x) | "
            "idle, compacted (target <= 3x text + 1 KB) | before: at default retention (x text) |",
            "|---|---:|---:|---:|---:|"]
    for scope, name in (("profile", "Markdown profile (resource)"), ("plan", "JSON plan (thread)")):
        text = now["active"]["text"][scope]
        active, idle = now["active"]["steady_lane"][scope], now["idle"]["per_lane"][scope]
        old = f"{before['active']['steady_lane'][scope]:,.0f} ({before['active']['steady_lane'][scope] / text:.1f}x)" \
            if before is not None else "-"
        out.append(f"| {name} | {text:,.0f} | {active:,.0f} ({active / text:.1f}x) | {idle:,.0f} "
                   f"(limit {3 * text + 1024:,.0f}: {'met' if idle <= 3 * text + 1024 else 'NOT met'}) | {old} |")
    out += ["", f"With `hash-max-listpack-value {LISTPACK_VALUE}` (deploy/redis.conf; Redis's default is 64): a "
            "document hash of up to that many bytes a value is one listpack instead of a hash table: "
            + ", ".join(f"{name} document {now['idle']['per_kind'][scope]['doc']:,.0f} -> "
                        f"{now['listpack_doc'][scope]:,.0f} B, idle lane {now['listpack_idle_lane'][scope]:,.0f} B "
                        f"(limit {3 * now['active']['text'][scope] + 1024:,.0f}), active lane "
                        f"{now['listpack_active_lane'][scope]:,.0f} B "
                        f"({now['listpack_active_lane'][scope] / now['active']['text'][scope]:.1f}x)"
                        for scope, name in (("profile", "profile"), ("plan", "plan")))
            + f"; **{now['listpack_per_million_gib']:.1f} GiB per 1M users** (same population)."]
    c = now["compaction"]
    out += ["", "| per user (profile + plan) | active, after the run | active, steady state | idle (compacted) | "
            f"**per 1M users, {ACTIVE_SHARE:.0%} wrote in the last day** |", "|---|---:|---:|---:|---:|"]
    if before is not None:
        b = before["active"]
        out.append(f"| before (baseline: {BEFORE_MEMORY[:7]}, no compaction) | {b['per_user']:,.0f} | "
                   f"{b['steady_user']:,.0f} | {b['steady_user']:,.0f} (history stays) | "
                   f"{before['per_million_gib']:.1f} GiB |")
    a = now["active"]
    out.append(f"| this tree | {a['per_user']:,.0f} | {a['steady_user']:,.0f} | {now['idle']['per_user']:,.0f} | "
               f"**{now['per_million_gib']:.1f} GiB** (target <= 12 GiB) |")
    ratio = f"; {before['per_million_gib'] / now['per_million_gib']:.1f}x less than before" if before else ""
    ratio += (f". With the active lanes as measured (20-30 writes each) instead: {now['per_million_measured_gib']:.1f} "
              "GiB" + (f" (before: {before['per_million_measured_gib']:.1f} GiB)" if before else ""))
    out += ["", f"Projection: {ACTIVE_SHARE:.0%} of users at their active steady state (a lane written long past its "
            f"retention of {DEFAULT_RETAIN_SIGNALS} holds about retain_signals + its mean chain length - 1 signals, "
            "projected from the measured bytes per signal) and the rest at their compacted size"
            f"{ratio}. Cross-check by INFO used_memory (delta over the run / users): before "
            + (f"{before['active']['used_per_user']:,.0f} B" if before else "-")
            + f", active {a['used_per_user']:,.0f} B, idle {now['idle']['used_per_user']:,.0f} B per user.",
            "", f"Compaction of all {c['lanes']:,} lanes (the worker's own passes of 500 lanes, one script call "
            f"per partition and 64 lanes): {c['compacted']:,} compacted ({c['snapshots']:,} needed a new snapshot of "
            f"their last delta), {c['removed']:,} signal entries removed, **{c['lanes_per_s']:,.0f} lanes/s**, "
            f"Redis CPU {c['redis_cpu_us_per_lane']:,.0f} us per lane.",
            "", f"{r['users']:,} users ({r['lanes']:,} lanes), {now['writes']:,} writes per run through the write "
            f"script and one worker with default settings; MEMORY USAGE (SAMPLES 0) over every key of "
            f"{r['sampled_users']:,} users' lanes; partition keys: write streams (trimmed), lane registry."
            + (f" Baseline skipped: {r['before_skipped']}." if before is None else "")]
    return out
