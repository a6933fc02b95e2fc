#!/usr/bin/env python3
"""Latency a consistent read (resourceVersion unset) adds over resourceVersion=0.

Sends --requests LISTs of one small collection over one keep-alive connection,
alternating RV="" and RV=0, and writes p50/p99/max of each to --out (JSON).
With the etcd source, RV="" costs one linearizable point read of etcd plus a requested
progress notification on the resource's watch, waited for before serving from the cache.

    python3 loadtest/scripts/rv_latency.py --url http://127.0.0.1:8080 \
        --path /api/v1/namespaces/ns-0/pods --requests 2000 --out result.json
"""
import argparse
import http.client
import json
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--path", default="/api/v1/namespaces/default/pods")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80)
    times = {"consistent": [], "any": []}
    items = {}
    for i in range(a.requests):
        kind = "consistent" if i % 2 == 0 else "any"
        q = "" if kind == "consistent" else "?resourceVersion=0"
        t0 = time.perf_counter()
        conn.request("GET", a.path + q)
        r = conn.getresponse()
        body = r.read()
        dt = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            raise SystemExit(f"{kind}: HTTP {r.status}: {body[:200]!r}")
        times[kind].append(dt)
        items[kind] = len(json.loads(body)["items"])
    out = {"label": a.label, "url": a.url, "path": a.path, "requests": a.requests}
    for k, xs in times.items():
        out[k] = {
            "items": items.get(k),
            "p50_ms": round(pct(xs, 0.50), 3),
            "p99_ms": round(pct(xs, 0.99), 3),
            "max_ms": round(max(xs), 3),
        }
    out["added_p50_ms"] = round(out["consistent"]["p50_ms"] - out["any"]["p50_ms"], 3)
    out["added_p99_ms"] = round(out["consistent"]["p99_ms"] - out["any"]["p99_ms"], 3)
    text = json.dumps(out, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
