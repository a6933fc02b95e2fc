"""Summarizes profiles/dhat-*.json.gz: bytes and blocks allocated per request (profile minus
baseline, divided by the 4 requests) and the request path's top allocation sites."""
import gzip, json, os

here = os.path.dirname(os.path.abspath(__file__))
load = lambda n: json.load(gzip.open(os.path.join(here, f"dhat-{n}.json.gz")))

def sites(d):
    out = {}
    for p in d["pps"]:
        frames = [d["ftbl"][i] for i in p["fs"]]
        ours = [f.split(": ", 1)[-1].split(" (")[0] for f in frames[:14] if any(k in f for k in ("listwatch", "hyper", "bytes::"))]
        key = " <- ".join(ours)[:200]
        t = out.setdefault(key, [0, 0])
        t[0] += p["tb"]; t[1] += p["tbk"]
    return out

base = load("base")
print(f"baseline peak heap (t-gmax): {base['pps'] and sum(p['gb'] for p in base['pps']):,} bytes")
base_sites = sites(base)
for name, what in [("list4", "LIST"), ("watchlist4", "watch-list"), ("paged4", "paged LIST (8 pages)"),
                   ("list4-protobuf", "protobuf LIST"), ("watchlist4-protobuf", "protobuf watch-list"),
                   ("list4-metadata-protobuf", "protobuf PartialObjectMetadata LIST")]:
    d = load(name)
    tb = sum(p["tb"] for p in d["pps"]) - sum(p["tb"] for p in base["pps"])
    tbk = sum(p["tbk"] for p in d["pps"]) - sum(p["tbk"] for p in base["pps"])
    print(f"\n{what}: {tb // 4:,} bytes in {tbk // 4} allocations per request (4,000 pods)")
    diffs = sorted(((v[0] - base_sites.get(k, [0, 0])[0], v[1] - base_sites.get(k, [0, 0])[1], k) for k, v in sites(d).items()), reverse=True)
    for b, n, k in diffs[:4]:
        print(f"  {b // 4:>9,} B {n // 4:>4} blocks  {k}")
