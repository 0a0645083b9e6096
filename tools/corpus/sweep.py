#!/usr/bin/env python3
"""Allocator settings on the corpus, each averaged over large-block thresholds.

    cargo build --release -p genesis-mem
    python3 tools/corpus/sweep.py [--bin target/release/genesis-mem] [--corpus DIR]
    python3 tools/corpus/sweep.py --handle-caps 16MiB,32MiB,64MiB,128MiB

Whether a request counts as large (`Config::large_bytes`) decides which tensors get handles of
their own, and single traces move by several percent when the threshold moves by a few MiB.
A workload never seen places its tensor sizes at random against the threshold, so each setting
(large-block pieces, burst headroom, small-request bound) is replayed with ten thresholds and
judged by the means: traces meeting both targets, summed ratio excess over the target, traces
over the driver-call budget, on the design half, the held-out half, the unseen and the fresh traces of
the corpus (`corpus.py`'s `split_of`). Settings are chosen on the design half only.

With `--handle-caps`, it instead replays the default settings with physical handles capped at
each size (`--max-handle`) and prints, per group, the traces meeting the ratio target, the
traces within the call budget and the traces meeting both: how the two targets trade against
each other as handles get finer.
"""
import argparse
import glob
import itertools
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import split_of  # noqa: E402

THRESHOLDS = ["48MiB", "56MiB", "64MiB", "80MiB", "96MiB", "128MiB", "160MiB", "192MiB",
              "256MiB", "320MiB"]
PIECES = ["1", "2", "4"]
HEADROOM = ["32", "64"]
SMALL = ["64KiB", "256KiB"]
GROUPS = ["design", "held out", "unseen", "fresh"]


def replay(binary, traces, opts):
    out = subprocess.run([binary, "replay", "--json", *opts, *traces],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def score(results):
    """Per group: (traces meeting both targets, summed ratio excess, traces over budget)."""
    out = {g: [0, 0.0, 0] for g in GROUPS}
    for r in results:
        s = out[split_of(r["trace"])]
        s[0] += bool(r["meets_targets"])
        s[1] += max(0.0, r["ratio"] - r["target_ratio"])
        s[2] += r["call_budget"] is not None and r["driver_calls"] > r["call_budget"]
    return out


def handle_caps(binary, traces, caps):
    """Per cap: traces meeting the ratio target, within the call budget, and both, by group."""
    print("| handle cap | " + " | ".join(f"{g}: ratio met, within budget, both"
                                        for g in GROUPS) + " | all 3 groups: both |")
    print("| --- |" + " --- |" * (len(GROUPS) + 1))
    for cap in ["none", *caps]:
        opts = [] if cap == "none" else ["--max-handle", cap]
        counts = {g: [0, 0, 0, 0] for g in GROUPS}
        for r in replay(binary, traces, opts):
            c = counts[split_of(r["trace"])]
            ratio_ok = r["ratio"] <= r["target_ratio"]
            calls_ok = r["call_budget"] is None or r["driver_calls"] <= r["call_budget"]
            c[0] += ratio_ok
            c[1] += calls_ok
            c[2] += ratio_ok and calls_ok
            c[3] += 1
        cells = [f"{c[0]}, {c[1]}, {c[2]} of {c[3]}" for c in counts.values()]
        both = sum(c[2] for c in counts.values())
        print(f"| {cap} | " + " | ".join(cells) + f" | {both} of {len(traces)} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/genesis-mem")
    ap.add_argument("--corpus", default="crates/genesis-mem/corpus")
    ap.add_argument("--handle-caps", metavar="SIZE[,SIZE...]",
                    help="print the ratio / call-budget trade-off at these handle caps")
    args = ap.parse_args()
    traces = sorted(glob.glob(os.path.join(args.corpus, "*.trace.gz")))
    if not traces:
        sys.exit(f"no traces in {args.corpus}")
    if args.handle_caps:
        handle_caps(args.bin, traces, args.handle_caps.split(","))
        return
    print("| large-block pieces | burst headroom | small requests up to | "
          + " | ".join(f"{g}: both met, excess, over budget" for g in GROUPS) + " |")
    print("| --- | --- | --- |" + " --- |" * len(GROUPS))
    for pieces, headroom, small in itertools.product(PIECES, HEADROOM, SMALL):
        total = {g: [0, 0.0, 0] for g in GROUPS}
        for large in THRESHOLDS:
            opts = ["--large-bytes", large, "--small-bytes", small, "--headroom-div", headroom,
                    "--large-pieces", pieces]
            for group, s in score(replay(args.bin, traces, opts)).items():
                for i, v in enumerate(s):
                    total[group][i] += v
        n = len(THRESHOLDS)
        cells = [f"{total[g][0] / n:.1f}, {total[g][1] / n:.3f}, {total[g][2] / n:.1f}"
                 for g in GROUPS]
        print(f"| {pieces} | 1/{headroom} | {small} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
