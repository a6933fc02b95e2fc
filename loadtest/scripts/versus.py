#!/usr/bin/env python3
"""The Python half of loadtest/scripts/versus.sh (issue 49 item 4, issue 50's rows).

Subcommands:
  pods IN OUT COUNT NODES      the first COUNT pods of IN (NDJSON.gz) with spec.nodeName set
                               round-robin to storm-node-<i % NODES>, as kubelet-storm's
                               --pods-exist expects them
  extract ROW TARGET REPORT [UPSTREAM_SAMPLES UPSTREAM_CPU_S]
                               the figures of one loadtest report, merged into
                               loadtest/results/versus/ROW.json under TARGET (the report
                               itself stays in /tmp: its per-client arrays are large)
  aborted ROW TARGET WHY       records a run that was stopped (the memory guard) or failed
  proof GATEWAY KAS TOKEN CA BURSTS READS
                               issue 49 item 3's must-show: bursts of READS consistent
                               LISTs of all pods through the gateway, each after a pod
                               written through it (and a ConfigMap written to kube-apiserver
                               directly, so the collection is idle while the RV moves);
                               listwatch_upstream_proof_bytes_total per burst against one
                               full LIST; every read must hold every acknowledged pod
  render                       docs/versus-kube-apiserver.md from loadtest/results/versus/
"""
import concurrent.futures
import gzip
import http.client
import json
import os
import ssl
import sys
import time

OUT = "loadtest/results/versus"
DOC = "docs/versus-kube-apiserver.md"
TARGETS = ["kube-apiserver", "fork", "lw-etcd", "lw-gateway"]
NAMES = {
    "kube-apiserver": "kube-apiserver 1.36.2",
    "fork": "the fork (listwatch inside)",
    "lw-etcd": "listwatch, etcd source",
    "lw-gateway": "listwatch, gateway",
}
MIB = 1024.0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save(path, data):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def cmd_pods(src, dst, count, nodes):
    count, nodes = int(count), int(nodes)
    n = 0
    with gzip.open(src, "rt") as f, gzip.open(dst, "wt") as out:
        for line in f:
            if not line.strip():
                continue
            if n == count:
                break
            p = json.loads(line)
            p.setdefault("spec", {})["nodeName"] = f"storm-node-{n % nodes}"
            out.write(json.dumps(p, separators=(",", ":")) + "\n")
            n += 1
    if n < count:
        sys.exit(f"versus.py pods: {src} has only {n} pods")


def r1(x, d=1):
    return None if x is None else round(x, d)


def kib_to_mib(k):
    return None if k is None else round(k / MIB, 1)


def upstream(samples_file, cpu_s):
    """Idle (first sample) and peak of the upstream kube-apiserver's RSS during a run."""
    try:
        with open(samples_file) as f:
            xs = [int(line) for line in f if line.strip().isdigit()]
    except FileNotFoundError:
        xs = []
    if not xs:
        return {}
    return {
        "upstream_idle_mib": kib_to_mib(xs[0]),
        "upstream_peak_minus_idle_mib": kib_to_mib(max(xs) - xs[0]),
        "upstream_cpu_s": r1(float(cpu_s), 2),
    }


def errors_of(rep):
    errs = [c.get("error") for c in rep.get("per_client", []) if c.get("error")]
    return len(errs), (errs[0][:200] if errs else None)


def extract(rep):
    """The few figures of a report the doc shows."""
    f = {
        "complete": rep.get("complete"),
        "idle_mib": kib_to_mib(rep.get("idle_rss_kib")),
        "peak_minus_idle_mib": kib_to_mib(rep.get("peak_minus_idle_kib")),
        "duration_s": r1(rep.get("duration_s"), 2),
        "server_cpu_s": r1(rep.get("server_cpu_s"), 2),
    }
    n, first = errors_of(rep)
    f["client_errors"] = n
    if first:
        f["first_error"] = first
    fb = rep.get("first_byte")
    if fb:
        f["first_byte_p50_ms"] = r1(fb.get("first_byte_p50_ms"))
        f["first_byte_max_ms"] = r1(fb.get("first_byte_max_ms"))
    objs = rep.get("objects_per_client") or []
    if objs and rep.get("scenario") in ("list", "relist-storm"):
        f["objects_min"] = min(objs)
    inf = rep.get("informers")
    if inf:
        f["sync_s_max"] = r1(inf.get("sync_s_max"), 2)
        f["requests_to_sync"] = inf.get("requests_to_sync")
        f["informers"] = inf.get("informers")
    k = rep.get("kubelet")
    if k:
        nodes = k.get("nodes") or 1
        idle = rep.get("idle_rss_kib") or 0
        f.update({
            "nodes": nodes,
            "pods": k.get("pods"),
            "sync_s_p50": r1(k.get("sync_s_p50"), 2),
            "sync_s_max": r1(k.get("sync_s_max"), 2),
            "sync_peak_minus_idle_mib": kib_to_mib(k.get("sync_peak_minus_idle_kib")),
            "per_connection_kib": r1((k.get("sync_peak_minus_idle_kib") or 0) / nodes, 2),
            "connected_minus_idle_mib": kib_to_mib((k["connected_rss_kib"] - idle)
                                                   if k.get("connected_rss_kib") else None),
            "retries_after_429": k.get("retries_after_429"),
            "relists_after_error": k.get("relists_after_error"),
            "storm_server_cpu_s": r1(k.get("storm_server_cpu_s"), 2),
            "churn_writes": k.get("churn_writes"),
            "churn_write_errors": k.get("churn_write_errors"),
            "churn_events": k.get("churn_events"),
            "every_node_got_its_events": k.get("every_node_got_its_events"),
            "nodes_synced": sum(1 for c in rep.get("per_client", []) if c.get("seconds")),
        })
        if k.get("error_samples"):
            f["first_error"] = k["error_samples"][0][:200]
        if k.get("first_error_event"):
            f["first_error_event"] = k["first_error_event"][:200]
    c = rep.get("churn")
    if c:
        f.update({
            "writes": c.get("writes"),
            "write_errors": c.get("write_errors"),
            "delivery_p50_ms": r1(c.get("p50_ms")),
            "delivery_p99_ms": r1(c.get("p99_ms")),
            "delivered_events": c.get("delivered_events"),
            "every_watcher_saw_every_event": c.get("every_watcher_saw_every_event"),
        })
    if rep.get("bytes_per_watcher") is not None:
        f["kib_per_watcher"] = r1(rep["bytes_per_watcher"] / 1024, 2)
    if rep.get("settled_bytes_per_watcher") is not None:
        f["settled_kib_per_watcher"] = r1(rep["settled_bytes_per_watcher"] / 1024, 2)
    return f


def cmd_extract(row, target, report, samples=None, cpu=None):
    rep = load(report)
    path = f"{OUT}/{row}.json"
    data = load(path)
    f = extract(rep) if rep else {"complete": False, "aborted": "no report written"}
    if samples:
        f.update(upstream(samples, cpu or 0))
    data[target] = f
    save(path, data)
    print(f"versus: {row} {target}: " + ", ".join(
        f"{k}={v}" for k, v in f.items() if k in (
            "complete", "duration_s", "peak_minus_idle_mib", "first_byte_max_ms", "sync_s_max",
            "delivery_p99_ms", "kib_per_watcher", "client_errors", "upstream_peak_minus_idle_mib")))


def cmd_aborted(row, target, why):
    path = f"{OUT}/{row}.json"
    data = load(path)
    f = data.get(target, {})
    f["aborted"] = why
    f["complete"] = False
    data[target] = f
    save(path, data)


# --- issue 49 item 3: consistent reads through the gateway, proven by a bookmark or metadata ---------------

class Client:
    def __init__(self, url, token, ca):
        self.host = url.removeprefix("https://")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.token = token

    def conn(self):
        return http.client.HTTPSConnection(self.host, context=self.ctx, timeout=600)

    def request(self, method, path, body=None, accept="application/json"):
        c = self.conn()
        h = {"Authorization": "Bearer " + self.token, "Accept": accept}
        if body is not None:
            h["Content-Type"] = "application/json"
        c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def scan(self, path, needles, item_marker):
        """GETs path and streams the body: which needles it holds, how many item markers,
        and its size (nothing kept but a small overlap between reads)."""
        c = self.conn()
        c.request("GET", path, headers={"Authorization": "Bearer " + self.token,
                                        "Accept": "application/json"})
        r = c.getresponse()
        found, items, size, tail = set(), 0, 0, b""
        keep = max(len(n) for n in needles + [item_marker]) - 1
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            size += len(chunk)
            buf = tail + chunk
            for n in needles:
                if n not in found and n in buf:
                    found.add(n)
            # Count markers that end in the new bytes only (the overlap was counted before).
            items += buf.count(item_marker) - tail.count(item_marker)
            tail = buf[-keep:]
        c.close()
        return r.status, found, items, size


# How each item of a JSON PodList begins (kube-apiserver's encoding, which listwatch's matches).
ITEM = b'{"metadata":{"name":"'


def counter(metrics, name):
    for line in metrics.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def share(proof, form):
    """A burst's proof bytes over one full LIST in `form`: a fraction, or 1/N when tiny."""
    r = proof["proof_bytes_per_burst_max"] / proof[f"full_list_{form}_bytes"]
    return f"{r:.3f}" if r >= 0.001 else f"1/{round(1 / r):,}" if r else "0"


def cmd_proof(gateway, kas, token, ca, bursts, reads):
    bursts, reads = int(bursts), int(reads)
    gw, up = Client(gateway, token, ca), Client(kas, token, ca)
    ns = "versus-proof"
    up.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
    up.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
               {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    # One full LIST of the idle collection, as kube-apiserver serves it, in both encodings.
    _, full_json = up.request("GET", "/api/v1/pods")
    _, full_pb = up.request("GET", "/api/v1/pods", accept="application/vnd.kubernetes.protobuf")
    base = full_json.count(ITEM)
    stamp = time.strftime("%H%M%S")

    def metrics():
        return gw.request("GET", "/metrics", accept="text/plain")[1].decode()

    before = metrics()
    acked, per_burst, bad, burst_seconds = [], [], [], []
    t0 = time.time()
    for b in range(bursts):
        name = f"versus-acked-{stamp}-{b:02d}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]}}
        st, body = gw.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        if st != 201:
            sys.exit(f"proof: creating {name} through the gateway: {st} {body[:300]!r}")
        acked.append(name)
        time.sleep(0.3)
        up.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                   {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"versus-moves-rv-{stamp}-{b:02d}"}})
        m0 = metrics()
        needles = [f'"name":"{a}"'.encode() for a in acked]
        tb = time.time()
        with concurrent.futures.ThreadPoolExecutor(reads) as ex:
            outs = list(ex.map(lambda _: gw.scan("/api/v1/pods", needles, ITEM),
                               range(reads)))
        burst_seconds.append(round(time.time() - tb, 2))
        m1 = metrics()
        per_burst.append(counter(m1, "listwatch_upstream_proof_bytes_total")
                         - counter(m0, "listwatch_upstream_proof_bytes_total"))
        for i, (st, found, items, size) in enumerate(outs):
            if st != 200 or len(found) != len(needles) or items < base + len(acked):
                bad.append(f"burst {b} read {i}: HTTP {st}, {len(found)} of {len(needles)} "
                           f"acknowledged pods, {items} items (≥ {base + len(acked)} expected)")
    after = metrics()

    def delta(n):
        return counter(after, n) - counter(before, n)

    res = {
        "pods": base,
        "bursts": bursts,
        "reads_per_burst": reads,
        "full_list_json_bytes": len(full_json),
        "full_list_protobuf_bytes": len(full_pb),
        "probes": delta("listwatch_upstream_consistent_probes_total"),
        "caught_up_by_stream": delta("listwatch_upstream_consistent_by_stream_total"),
        "proof_lists": delta("listwatch_upstream_proof_lists_total"),
        "proof_watches": delta("listwatch_upstream_proof_watches_total"),
        "proved_by_bookmark": delta("listwatch_upstream_consistent_by_bookmark_total"),
        "proof_bytes": delta("listwatch_upstream_proof_bytes_total"),
        "proof_bytes_per_burst_max": max(per_burst) if per_burst else None,
        "proof_bytes_per_burst_mean": sum(per_burst) / len(per_burst) if per_burst else None,
        "burst_seconds": burst_seconds,
        "every_read_holds_every_acknowledged_write": not bad,
        "failures": bad[:5],
        "seconds": round(time.time() - t0, 1),
    }
    res["max_burst_over_full_json"] = res["proof_bytes_per_burst_max"] / len(full_json)
    res["max_burst_over_full_protobuf"] = res["proof_bytes_per_burst_max"] / len(full_pb)
    save(f"{OUT}/proof.json", res)
    print("versus: proof " + json.dumps({k: v for k, v in res.items() if k != "failures"}))


# --- the doc ------------------------------------------------------------------------------

def fmt(x, unit=""):
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, float):
        x = f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"
    elif isinstance(x, int):
        x = f"{x:,}"
    return f"{x}{unit}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def ratio_s(a, b):
    r = ratio(a, b)
    return "—" if r is None else (f"{r:.3f}" if r < 0.1 else f"{r:.2f}")


# Each row: its file, its title, the figure that says "faster" (lower is better), the memory
# figure, and the other figures shown.
ROWS = [
    ("list-16-json", "16 concurrent LISTs, JSON", "duration_s", "peak_minus_idle_mib",
     ["first_byte_p50_ms", "first_byte_max_ms", "server_cpu_s"]),
    ("list-16-protobuf", "16 concurrent LISTs, protobuf", "duration_s", "peak_minus_idle_mib",
     ["first_byte_p50_ms", "first_byte_max_ms", "server_cpu_s"]),
    ("list-64-json", "64 concurrent LISTs, JSON", "duration_s", "peak_minus_idle_mib",
     ["first_byte_p50_ms", "first_byte_max_ms", "server_cpu_s"]),
    ("list-64-protobuf", "64 concurrent LISTs, protobuf", "duration_s", "peak_minus_idle_mib",
     ["first_byte_p50_ms", "first_byte_max_ms", "server_cpu_s"]),
    ("informers-list-json", "8 informers, LIST + WATCH, JSON", "sync_s_max",
     "peak_minus_idle_mib", ["requests_to_sync", "server_cpu_s"]),
    ("informers-list-protobuf", "8 informers, LIST + WATCH, protobuf", "sync_s_max",
     "peak_minus_idle_mib", ["requests_to_sync", "server_cpu_s"]),
    ("informers-watchlist-json", "8 informers, watch-list, JSON", "sync_s_max",
     "peak_minus_idle_mib", ["requests_to_sync", "server_cpu_s"]),
    ("informers-watchlist-protobuf", "8 informers, watch-list, protobuf", "sync_s_max",
     "peak_minus_idle_mib", ["requests_to_sync", "server_cpu_s"]),
    ("kubelet-storm", "kubelet storm: nodes over HTTP/2, protobuf watch-lists", "sync_s_max",
     "sync_peak_minus_idle_mib",
     ["sync_s_p50", "per_connection_kib", "connected_minus_idle_mib", "peak_minus_idle_mib",
      "storm_server_cpu_s", "nodes_synced", "retries_after_429", "relists_after_error", "churn_writes",
      "every_node_got_its_events"]),
    ("idle-watchers", "10,000 idle watchers (HTTP/2, 200 a connection)", None,
     "peak_minus_idle_mib", ["kib_per_watcher", "settled_kib_per_watcher"]),
    ("churn", "churn: 1,000 writes/s asked, 1,000 watchers", "delivery_p99_ms",
     "peak_minus_idle_mib", ["delivery_p50_ms", "writes", "write_errors",
                             "every_watcher_saw_every_event", "server_cpu_s"]),
    ("relist-storm", "relist storm: 16 clients LIST, watch, drop and relist at once",
     "duration_s", "peak_minus_idle_mib", ["server_cpu_s"]),
]
FORK_ROWS = {"list-16-json", "list-16-protobuf", "list-64-json", "list-64-protobuf",
             "informers-list-json", "informers-list-protobuf", "informers-watchlist-json",
             "informers-watchlist-protobuf", "kubelet-storm"}
LABEL = {
    "duration_s": "time to all complete, s", "peak_minus_idle_mib": "peak − idle RSS, MiB",
    "first_byte_p50_ms": "first byte p50, ms", "first_byte_max_ms": "first byte max, ms",
    "server_cpu_s": "server CPU, s", "sync_s_max": "slowest sync, s",
    "requests_to_sync": "requests to sync", "sync_s_p50": "sync p50, s",
    "sync_peak_minus_idle_mib": "peak − idle until every node synced, MiB",
    "per_connection_kib": "per connection (node), KiB",
    "connected_minus_idle_mib": "connections open, before any request, MiB",
    "storm_server_cpu_s": "server CPU for the storm, s", "nodes_synced": "nodes synced",
    "retries_after_429": "retries after 429",
    "relists_after_error": "relists after an ERROR event (before syncing)", "churn_writes": "churn writes done (10 s)",
    "every_node_got_its_events": "every node got exactly its events",
    "kib_per_watcher": "peak per watcher, KiB", "settled_kib_per_watcher": "settled per watcher, KiB",
    "delivery_p99_ms": "delivery p99, ms", "delivery_p50_ms": "delivery p50, ms",
    "writes": "writes done", "write_errors": "write errors",
    "every_watcher_saw_every_event": "every watcher saw every event",
    "upstream_peak_minus_idle_mib": "upstream kube-apiserver peak − idle meanwhile, MiB",
    "upstream_cpu_s": "upstream kube-apiserver CPU meanwhile, s",
    "complete": "complete",
    "idle_mib": "RSS at the run's start (its idle), MiB",
}


NOTES = [
    "Idle RSS is taken at the start of each run. With `VERSUS_RESTART=1` (the run above) every "
    "server is restarted after each of its rows, so every row starts from a fresh process and "
    "its peak − idle is all the row made it grow. A fresh kube-apiserver's idle still holds "
    "room: Go collects when the heap reaches twice what was live (GOGC=100), and right after "
    "its caches filled much of the heap is garbage not yet collected, so a row that allocates "
    "less than that room (10,000 idle watchers, churn) shows almost no growth in RSS. Without "
    "restarts a process keeps what an earlier row made it grow (Go hands its heap back over "
    "minutes, jemalloc keeps freed pages for a while).",
    "Every client is the admin (system:masters): kube-apiserver's API Priority and Fairness "
    "exempts that group, and listwatch ran with its per-user cap lifted "
    "(`--max-lists-per-user 0`). The fork's listwatch has no per-user caps by default (its "
    "`--listwatch-max-lists-per-user` and `--listwatch-max-watches-per-user`: APF in front of "
    "it shares the server by flow) and its LIST cap is kube-apiserver's in-flight limits; "
    "a fork column measured before that change (see the runs above) had 100 LISTs per user, "
    "and its 5,000 nodes of one user were answered 429 and retried after `Retry-After`, as "
    "client-go does: `retries after 429` in the storm row. Real kubelets are 5,000 users.",
    "The storm's pods are the 40,000 of the LIST rows (loaded with `spec.nodeName`), about 8 a "
    "node; after the sync every target's storm churns pods on the nodes at 1,000 writes/s "
    "asked for 10 s (create, label patch, delete with `gracePeriodSeconds=0`) through that "
    "target; peak − idle in the table is until every node synced, the whole-run figure (with "
    "the churn) beside it.",
    "Informers: one client with 8 informers sharing client-go's default rate limiter (5/s, "
    "burst 10), gzip asked for as Go's transport does; LIST mode pages with `limit=500` from "
    "`resourceVersion=0` then watches; every object decoded into a typed Pod and dropped "
    "(`--discard-objects`: 8 stores of 40,000 do not fit beside four servers).",
    "The gateway serves LISTs and watches from its own cache: the upstream column shows that "
    "kube-apiserver spent next to nothing for those rows; writes (churn, storm churn) pass "
    "through it to kube-apiserver, whose share is shown beside.",
    "Times are wall-clock on 2 cores shared by the load generator, the four servers, etcd and "
    "other sessions' builds (load average above): ratios between servers measured minutes "
    "apart under a moving load are indicative, not exact.",
]


def cmd_render():
    meta = load(f"{OUT}/meta.json")
    rows = {r[0]: load(f"{OUT}/{r[0]}.json") for r in ROWS}
    proof = load(f"{OUT}/proof.json")
    baseline = {}
    for d in rows.values():
        for t, x in d.items():
            if x.get("idle_mib") is not None:
                baseline[t] = min(baseline.get(t, x["idle_mib"]), x["idle_mib"])
    L = []
    w = L.append
    w("# listwatch side by side with kube-apiserver 1.36 (issues 49 and 50)")
    w("")
    w("Generated by `loadtest/scripts/versus.py render` from `loadtest/results/versus/*.json`, "
      "which `loadtest/scripts/versus.sh` writes; one command runs everything and regenerates "
      "this file:")
    w("")
    w("    " + meta.get("command", "loadtest/scripts/versus.sh"))
    w("")
    w(f"- **Run**: {meta.get('started', '?')} → {meta.get('ended', '?')} UTC "
      f"({fmt(meta.get('duration_min'))} min), commit `{meta.get('commit', '?')}`.")
    w(f"- **Machine**: {meta.get('machine', '?')}. Load average at the start "
      f"{meta.get('load_start', '?')}, at the end {meta.get('load_end', '?')}, sampled every "
      f"row: max {fmt(meta.get('load_max'))} (other sessions were compiling on the same 2 "
      "cores: every figure here shares the machine with them, and with the load generator).")
    w(f"- **Data**: {fmt(meta.get('pods'))} pods of `../shared/data/pods-40k.ndjson.gz` "
      f"loaded through kube-apiserver by `loadtest/scripts/kube_load.py` "
      f"({fmt(meta.get('load_s'))} s), each with `spec.nodeName` set round-robin to "
      f"`storm-node-<i % {meta.get('nodes', '?')}>` so that the kubelet storm runs on the same "
      "pods (kubelet-storm `--pods-exist`); no `status`. etcd 3.6.13 over mutual TLS "
      "(`ETCD_TLS=1 ../shared/k8s/run.sh`), one etcd for all four servers.")
    w("- **Load generator**: `target/release/listwatch-loadtest` on the same machine, every "
      "target over https with the admin token (`--ca-file`, `--token`) and `--pid` of the "
      "server measured (its RSS every 100 ms, its CPU around the run). Full reports were "
      "written to /tmp and reduced to the figures here.")
    w("")
    w("## The four servers")
    w("")
    for t in TARGETS:
        w(f"- **{NAMES[t]}**: `{meta.get('targets', {}).get(t, '?')}`")
    w("")
    w("Peak − idle is each server's own RSS (for listwatch: listwatch's process; the fork is "
      "kube-apiserver and listwatch in one process). For the gateway and the etcd source the "
      "upstream kube-apiserver's growth over the same run is given beside it (it serves the "
      "gateway's followed streams, the writes both pass on, and the gateway's consistency "
      "probes). Ratios are target ÷ kube-apiserver; for times and memory lower is better.")
    w("")
    w("## Rows")
    w("")
    for key, title, fast, mem, extra in ROWS:
        d = rows.get(key) or {}
        w(f"### {title}")
        w("")
        if key in meta.get("commands", {}):
            w(f"`{meta['commands'][key]}`")
            w("")
        if not d:
            w("Not run.")
            w("")
            continue
        ts = [t for t in TARGETS if t in d]
        w("| figure | " + " | ".join(NAMES[t] for t in ts) + " |")
        w("|---|" + "---|" * len(ts))
        k = d.get("kube-apiserver", {})
        for fig in ([fast] if fast else []) + [mem, "idle_mib"] + extra + ["complete"]:
            cells = []
            for t in ts:
                v = d[t].get(fig)
                c = fmt(v)
                if t != "kube-apiserver" and fig in (fast, mem) and not isinstance(v, bool):
                    c += f" ({ratio_s(v, k.get(fig))}×)"
                cells.append(c)
            w(f"| {LABEL.get(fig, fig)} | " + " | ".join(cells) + " |")
        # The other bound: a process that an earlier row grew starts this one high (see "How
        # to read it"); its peak less the lowest RSS it started any row with.
        if mem == "peak_minus_idle_mib":
            cells = []
            for t in ts:
                x = d[t]
                if x.get("idle_mib") is None or x.get(mem) is None or baseline.get(t) is None:
                    cells.append("—")
                else:
                    cells.append(fmt(round(x["idle_mib"] + x[mem] - baseline[t], 1)))
            w("| peak − the lowest RSS it started any row with, MiB | " + " | ".join(cells) + " |")
        for fig in ("upstream_peak_minus_idle_mib", "upstream_cpu_s"):
            if any(fig in d[t] for t in ts):
                w(f"| {LABEL[fig]} | " + " | ".join(
                    fmt(d[t].get(fig)) if (d[t].get(fig) or 0) >= 0 else "—" for t in ts) + " |")
        w("")
        for t in ts:
            if (d[t].get("aborted") or d[t].get("first_error") or d[t].get("client_errors")
                    or d[t].get("note") or d[t].get("first_error_event")):
                w(f"- {NAMES[t]}: " + "; ".join(
                    s for s in (d[t].get("aborted"), d[t].get("note"),
                                d[t].get("client_errors") and f"{d[t]['client_errors']} clients "
                                f"failed",
                                d[t].get("first_error") and f"first error: `{d[t]['first_error']}`",
                                d[t].get("first_error_event")
                                and f"first ERROR event: `{d[t]['first_error_event']}`")
                    if s))
        w("")
    w("## Consistent reads through the gateway, proven by a bookmark (issue 49 item 3)")
    w("")
    if proof:
        run = proof.get("run")
        if run:  # a row rerun on its own, after the others (a partial run keeps their figures)
            w(f"`{run['command']}`")
            w("")
            w(f"This row alone was run again, {run['started']} → {run['ended']}, commit "
              f"`{run['commit']}`, load {run['load']}; the other rows are from the run above.")
        else:
            w(f"`{meta.get('commands', {}).get('proof', '')}`")
        w("")
        w(f"{proof['bursts']} bursts of {proof['reads_per_burst']} concurrent consistent LISTs "
          f"(no resourceVersion) of all {fmt(proof['pods'])} pods through the gateway, each burst "
          "after a pod created through the gateway (acknowledged, 201) and a ConfigMap created "
          "on kube-apiserver directly (the RV moves, the pods stay idle).")
        w("")
        w("| figure | value |")
        w("|---|---|")
        w(f"| one full LIST from kube-apiserver, JSON / protobuf | "
          f"{fmt(proof['full_list_json_bytes'])} B / {fmt(proof['full_list_protobuf_bytes'])} B |")
        w(f"| upstream probes / caught up by the stream / proof LISTs | {fmt(int(proof['probes']))}"
          f" / {fmt(int(proof['caught_up_by_stream']))} / {fmt(int(proof['proof_lists']))} |")
        if "proof_watches" in proof:
            w(f"| proof watches / proved by their bookmark | {fmt(int(proof['proof_watches']))}"
              f" / {fmt(int(proof['proved_by_bookmark']))} |")
        w(f"| upstream proof bytes, all bursts | {fmt(int(proof['proof_bytes']))} B |")
        w(f"| per burst, largest | {fmt(int(proof['proof_bytes_per_burst_max']))} B: "
          f"**{share(proof, 'json')}** of a full JSON LIST, "
          f"{share(proof, 'protobuf')} of a protobuf one |")
        if "burst_seconds" in proof:
            w(f"| a burst's time, until its last LIST ended | "
              f"{', '.join(f'{x:.1f} s' for x in proof['burst_seconds'])} |")
        w(f"| every read held every acknowledged pod | "
          f"{fmt(proof['every_read_holds_every_acknowledged_write'])} |")
        for f_ in proof.get("failures", []):
            w(f"| failure | {f_} |")
        w("")
    else:
        w("Not run.")
        w("")
    w("## Goals")
    w("")
    for line in goals(rows, proof):
        w("- " + line)
    w("")
    w("## What each ran with")
    w("")
    for k_, v in meta.get("flags", {}).items():
        w(f"- **{k_}**: `{v}`")
    w("")
    for n in meta.get("notes", []):
        w(n)
        w("")
    for r in meta.get("partial_runs", []):
        w(f"**A later run replaced some columns**: rows `{r['rows']}`, targets `{r['targets']}`, "
          f"{r['started']} → {r['ended']} UTC ({fmt(r.get('duration_min'))} min), commit "
          f"`{r['commit']}`, load average {r['load_start']} at the start, {r['load_end']} at "
          f"the end, max {fmt(r.get('load_max'))} sampled after each row:")
        w("")
        w("    " + r["command"])
        w("")
    w("## How to read it")
    w("")
    for n in NOTES:
        w("- " + n)
    w("")
    with open(DOC, "w") as f:
        f.write("\n".join(L).rstrip() + "\n")
    print(f"versus: wrote {DOC}")


def goals(rows, proof):
    out = []

    def check(targets, row_keys, mem_bound=None, mem_abs=None):
        slow, fat, missing = [], [], []
        for key, title, fast, mem, _ in ROWS:
            if key not in row_keys:
                continue
            d = rows.get(key) or {}
            k = d.get("kube-apiserver", {})
            for t in targets:
                x = d.get(t)
                if not x or x.get("aborted"):
                    missing.append(f"{key} ({NAMES[t]} stopped or not run)")
                    continue
                mv = x.get(mem)
                if mem_abs is not None and (mv is None or mv > mem_abs):
                    # A bound of its own: it holds or not whatever kube-apiserver did.
                    fat.append(f"{key} ({NAMES[t]} {fmt(mv)} MiB)")
                if k.get("aborted") or not k:
                    missing.append(f"{key} (kube-apiserver stopped or not run)")
                    continue
                if not x.get("complete", True):
                    missing.append(f"{key} ({NAMES[t]} incomplete: figures compared anyway)")
                if not k.get("complete", True):
                    missing.append(f"{key} (kube-apiserver incomplete: figures compared anyway)")
                if fast and (x.get(fast) is None or k.get(fast) is None or x[fast] >= k[fast]):
                    slow.append(f"{key} ({NAMES[t]} {fmt(x.get(fast))} vs {fmt(k.get(fast))})")
                km = k.get(mem)
                if mem_bound is not None and (mv is None or km is None or mv > km * mem_bound):
                    fat.append(f"{key} ({NAMES[t]} {fmt(mv)} vs {fmt(km)} MiB)")
        return slow, fat, missing

    lw = ["lw-etcd", "lw-gateway"]
    allrows = {r[0] for r in ROWS} - {"kubelet-storm"}
    slow, fat, missing = check(lw, allrows | {"kubelet-storm"})
    out.append("Issue 49, listwatch faster than kube-apiserver in every row (both ways of "
               "running it): " + verdict(slow, missing))
    slow, fat, missing = check(lw, allrows, mem_bound=0.1)
    out.append("Issue 49, listwatch's peak − idle ≤ 1/10 of kube-apiserver's (every row but the "
               "storm): " + verdict(fat, missing))
    storm = rows.get("kubelet-storm") or {}
    k = storm.get("kube-apiserver", {})
    bad = []
    for t in lw:
        x = storm.get(t, {})
        for fig in ("sync_peak_minus_idle_mib", "per_connection_kib"):
            if x.get(fig) is None or k.get(fig) is None or x[fig] > k[fig] / 2:
                bad.append(f"{NAMES[t]} {LABEL[fig]} {fmt(x.get(fig))} vs {fmt(k.get(fig))}")
    inc = [f"{NAMES[t]} incomplete ({fmt(storm.get(t, {}).get('nodes_synced'))} nodes synced)"
           for t in ["kube-apiserver"] + lw if not storm.get(t, {}).get("complete", False)]
    out.append("Issue 49, kubelet storm ≤ 1/2 of kube-apiserver's per connection and in total: "
               + verdict(bad, inc))
    if proof:
        ok = proof["max_burst_over_full_json"] <= 0.25 and proof[
            "every_read_holds_every_acknowledged_write"]
        out.append("Issue 49, consistent reads of the idle collection through the gateway cost "
                   "≤ 1/4 of a full LIST per burst, every read holding every acknowledged write: "
                   + ("**met**" if ok else "**not met**")
                   + f" ({share(proof, 'json')} of a full JSON LIST, "
                   f"{share(proof, 'protobuf')} of a protobuf one; reads "
                   f"{'complete' if proof['every_read_holds_every_acknowledged_write'] else 'MISSING writes'})")
    slow, fat, missing = check(["fork"], FORK_ROWS, mem_abs=64)
    out.append("Issue 50, the fork's peak − idle ≤ 64 MiB: " + verdict(fat, missing))
    out.append("Issue 50, the fork faster than kube-apiserver in every row: "
               + verdict(slow, missing))
    return out


def verdict(bad, missing):
    if not bad and not missing:
        return "**met**"
    s = "**not met**: " + "; ".join(bad) if bad else "**met in what was measured**"
    if missing:
        s += "; not measured, or incomplete: " + "; ".join(dict.fromkeys(missing))
    return s


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"pods": cmd_pods, "extract": cmd_extract, "aborted": cmd_aborted, "proof": cmd_proof,
     "render": cmd_render}[cmd](*args)


if __name__ == "__main__":
    main()
