#!/usr/bin/env python3
"""Shrinks load-test reports (loadtest/results/*.json) to what the docs quote.

A report's per-client, per-node and per-watcher arrays and its RSS samples (the chart's
data) are replaced by a summary of each — count, min, median, max and sum of every
numeric field, the errors counted with the first one kept — so the folder stays small
(issue 51: 139 files, 35 MB, mostly such arrays) while every figure the docs cite (the
scalars, and the slowest or median client) stays. Lists of 16 items or fewer are kept.

    scripts/summarize-results.py loadtest/results/*.json   # rewrites them in place
"""

import json
import statistics
import sys

KEEP = 16


def numbers_summary(values):
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return None
    out = {
        "min": min(nums),
        "p50": statistics.median(nums),
        "max": max(nums),
        "sum": sum(nums),
    }
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def summarize_list(values):
    out = {"summarized": True, "count": len(values)}
    if all(isinstance(v, dict) for v in values):
        keys = []
        for v in values:
            keys.extend(k for k in v if k not in keys)
        fields = {}
        for k in keys:
            column = [v.get(k) for v in values]
            present = [c for c in column if c is not None]
            if present and all(isinstance(c, bool) for c in present):
                fields[k] = {"true": sum(1 for c in column if c is True)}
            elif (s := numbers_summary(column)) is not None:
                fields[k] = s
            else:
                fields[k] = {"non_null": len(present)}
                if present:
                    fields[k]["first"] = present[0]
        out["fields"] = fields
    elif all(isinstance(v, list) for v in values):
        # Samples such as [seconds, kib]: each position summarized.
        width = max(len(v) for v in values)
        out["columns"] = [numbers_summary([v[i] for v in values if len(v) > i]) for i in range(width)]
    else:
        out.update(numbers_summary(values) or {"first": values[0]})
    return out


def shrink(value):
    if isinstance(value, dict):
        return {k: shrink(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > KEEP:
            return summarize_list(value)
        return [shrink(v) for v in value]
    return value


def main(paths):
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        with open(path, "w") as f:
            json.dump(shrink(report), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
