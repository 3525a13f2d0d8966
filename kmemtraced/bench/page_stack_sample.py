#!/usr/bin/env python3
"""How well a sample of page stacks by frame number estimates each page call
site: from a capture with a stack for every allocation (`kmemtraced
--page-stacks all`), every candidate mask is applied after the fact to the
allocations by page frame, and the call sites' estimated allocations (each
sampled one counted as the allocations it stands for, as the report does)
are set beside the true ones.

    kmemtrace-report -q --json --page --alloc -l 0 ALL.kmt > all.json
    kmemtraced/bench/page_stack_sample.py all.json [MASK ...]

MASKs in hex (default: the low bits 0xf, 0xf0, the recorder's 0xf00, 0xf000).
Prints per mask: the estimate of all allocations over the truth, the error
of the twelve busiest call sites (weighted by their allocations), and each
one's relative error.
"""
import collections
import json
import sys


def weight(mask, order):
    # An order-o block's frame number has its o low bits clear.
    return 1 << bin(mask & ~((1 << order) - 1)).count("1")


def main():
    rows = json.load(open(sys.argv[1]))["pages"]["by_pfn"]
    masks = [int(m, 16) for m in sys.argv[2:]] or [0xF, 0xF0, 0xF00, 0xF000]
    truth = collections.Counter()
    for r in rows:
        truth[r["callsite"]] += r["hits"]
    total = sum(truth.values())
    top = [s for s, _ in truth.most_common(12)]
    print(f"{sys.argv[1]}: {total:,} allocations; the busiest call sites:")
    for s in top:
        print(f"  {truth[s]:>9,}  {s}")
    print(f"{'mask':>8} {'all est/true':>13} {'top-12 error':>13}  per call site, in the order above")
    for m in masks:
        est = collections.Counter()
        for r in rows:
            if int(r["pfn"], 16) & m == 0:
                est[r["callsite"]] += r["hits"] * weight(m, r["order"])
        err = sum(abs(est[s] - truth[s]) for s in top) / sum(truth[s] for s in top)
        each = " ".join(f"{(est[s] - truth[s]) / truth[s]:+.2f}" for s in top)
        print(f"{m:#8x} {sum(est.values()) / total:13.3f} {err:13.3f}  {each}")


if __name__ == "__main__":
    main()
