"""The official Python `kubernetes` client against a listwatch server.

Usage: client_check.py http://127.0.0.1:PORT EXPECTED_PODS
Lists pods with limit/_continue, then streams a watch from the list's resourceVersion while
another thread creates, replaces and deletes a ConfigMap through the same client.
Exits non-zero (AssertionError) on any mismatch.
"""
import sys
import threading
import time

from kubernetes import client, watch

host, expected = sys.argv[1], int(sys.argv[2])
cfg = client.Configuration()
cfg.host = host
api = client.CoreV1Api(client.ApiClient(cfg))

names, cont, pages = [], None, 0
while True:
    page = api.list_pod_for_all_namespaces(limit=7, _continue=cont)
    names += [p.metadata.name for p in page.items]
    pages += 1
    cont = page.metadata._continue
    if not cont:
        break
assert len(names) == expected, (len(names), expected)
assert len(set(names)) == expected, "duplicates across pages"
assert pages == (expected + 6) // 7, pages
rv = api.list_namespaced_config_map("py").metadata.resource_version


def writer():
    time.sleep(0.5)
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c1"), data={"a": "1"})
    created = api.create_namespaced_config_map("py", cm)
    created.data = {"a": "2"}
    api.replace_namespaced_config_map("c1", "py", created)
    api.delete_namespaced_config_map("c1", "py")


writer_thread = threading.Thread(target=writer)
writer_thread.start()
seen = []
w = watch.Watch()
for ev in w.stream(api.list_namespaced_config_map, namespace="py", resource_version=rv, timeout_seconds=10):
    seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("a")))
    if len(seen) == 3:
        w.stop()
# The DELETED event can arrive before the writer has read its DELETE response: join it, so
# the interpreter never shuts down under a running thread.
writer_thread.join(timeout=10)
assert seen == [("ADDED", "c1", "1"), ("MODIFIED", "c1", "2"), ("DELETED", "c1", "2")], seen
print("python client ok:", len(names), "pods in", pages, "pages;", seen)
