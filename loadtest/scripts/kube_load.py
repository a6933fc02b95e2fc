#!/usr/bin/env python3
"""Creates the pods of an NDJSON(.gz) file in a real kube-apiserver, through its API.

Usage: kube_load.py URL TOKEN CA_FILE PODS.ndjson.gz [THREADS]

Each pod's namespace is created first, with the `default` service account no controller
makes here. Server-set metadata (uid, creationTimestamp, resourceVersion, managedFields,
generation) is dropped; a pod that already exists counts as loaded. Prints the count and
the time taken.
"""
import gzip
import http.client
import json
import ssl
import sys
import threading
import time


def main():
    url, token, ca, path = sys.argv[1:5]
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 8
    host = url.removeprefix("https://")
    ctx = ssl.create_default_context(cafile=ca)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        pods = [json.loads(line) for line in f if line.strip()]
    for p in pods:
        for k in ("uid", "creationTimestamp", "resourceVersion", "managedFields", "generation"):
            p["metadata"].pop(k, None)
        p.pop("status", None)

    def post(conn, path, body):
        conn.request("POST", path, json.dumps(body), {
            "Authorization": "Bearer " + token, "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status not in (201, 409):
            raise RuntimeError(f"POST {path}: {r.status} {data[:300]!r}")

    conn = http.client.HTTPSConnection(host, context=ctx)
    for ns in sorted({p["metadata"]["namespace"] for p in pods}):
        post(conn, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        post(conn, f"/api/v1/namespaces/{ns}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})

    errors = []
    t0 = time.time()

    def worker(part):
        c = http.client.HTTPSConnection(host, context=ctx)
        try:
            for p in part:
                post(c, f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
        except Exception as e:  # reported after every worker ended
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(pods[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        sys.exit(f"kube_load.py: {errors[0]}")
    print(f"kube_load.py: {len(pods)} pods in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
