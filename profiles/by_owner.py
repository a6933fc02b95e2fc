"""Live heap at a dhat profile's t-end, per node (argv[2] connections), by owner: h2's
connection and stream state, the connection task, ours (listwatch's request path), and the
store (the pods themselves), from the allocation sites' backtraces."""
import collections, gzip, json, sys

d = json.load(gzip.open(sys.argv[1]) if sys.argv[1].endswith(".gz") else open(sys.argv[1]))
n = int(sys.argv[2])
frames = d["ftbl"]
owner_bytes, owner_blocks = collections.Counter(), collections.Counter()
for p in d["pps"]:
    fr = [frames[i].split(": ", 1)[-1] for i in p["fs"]]
    trace = " | ".join(fr)
    ours = next((f.split(" (")[0] for f in fr if "listwatch" in f), "?")
    if any(k in trace for k in ("listwatch_store", "EmbeddedSource", "imbl::")):
        owner = "store (pods, index, log)"
    elif "Schema::" in trace:
        owner = "protobuf schema table"
    elif "h2::" in trace.split("listwatch")[0]:
        owner = "h2 (connection and stream state)"
    elif "tokio::runtime::task::new_task" in trace:
        owner = "task: " + ours[:70]
    elif "hyper::" in trace.split("listwatch")[0]:
        owner = "hyper"
    else:
        owner = "ours: " + ours[:90]
    owner_bytes[owner] += p["eb"]
    owner_blocks[owner] += p["ebk"]
for owner, b in owner_bytes.most_common(25):
    print(f"{b:>12,} B {b / n:>8,.0f} B/node {owner_blocks[owner]:>7} blocks  {owner}")
