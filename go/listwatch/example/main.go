// Command listwatch-example is a Go host on net/http alone with listwatch embedded
// through Wrap: it owns ConfigMap writes (POST, DELETE) and its RV counter, feeds every
// committed change, and lets listwatch answer reads (and discovery, so kubectl works).
// Users come from an X-Remote-User header, standing in for the host's authentication.
//
//	go/listwatch/example/run --listen 127.0.0.1:8082 --demo-pods 2000
//	kubectl --server http://127.0.0.1:8082 get pods -A
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"listwatch.local/listwatch"
)

// host is the apiserver stand-in: its own store of ConfigMaps and one RV counter.
type host struct {
	mu         sync.Mutex
	rv         uint64
	configmaps map[string][]byte // namespace/name → JSON
	lw         *listwatch.ListWatch
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`+"\n", msg, reason, code)
}

// ServeHTTP is the host's own handler: everything listwatch hands back.
func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// /api/v1/namespaces/{ns}/configmaps[/{name}]
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(p) < 5 || p[0] != "api" || p[1] != "v1" || p[2] != "namespaces" || p[4] != "configmaps" {
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	ns := p[3]
	h.mu.Lock()
	defer h.mu.Unlock() // fed under the lock: listwatch sees changes in commit order
	switch {
	case r.Method == http.MethodPost && len(p) == 5:
		var obj map[string]any
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&obj); err != nil {
			status(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		if name == "" {
			status(w, http.StatusUnprocessableEntity, "Invalid", "metadata.name is required")
			return
		}
		h.rv++
		meta["namespace"] = ns
		meta["resourceVersion"] = fmt.Sprint(h.rv)
		obj["kind"], obj["apiVersion"] = "ConfigMap", "v1"
		data, _ := json.Marshal(obj)
		h.configmaps[ns+"/"+name] = data
		if err := h.lw.Feed.Put(listwatch.GVR{Version: "v1", Resource: "configmaps"}, h.rv, data); err != nil {
			log.Printf("feed: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(append(data, '\n'))
	case r.Method == http.MethodDelete && len(p) == 6:
		if _, ok := h.configmaps[ns+"/"+p[5]]; !ok {
			status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("configmaps %q not found", p[5]))
			return
		}
		delete(h.configmaps, ns+"/"+p[5])
		h.rv++
		if err := h.lw.Feed.Delete(listwatch.GVR{Version: "v1", Resource: "configmaps"}, h.rv, ns, p[5]); err != nil {
			log.Printf("feed: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`)
	default:
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" is not supported here")
	}
}

// relist answers listwatch when the fed stream broke: the host's own state.
func (h *host) relist(g listwatch.GVR) (uint64, [][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var objects [][]byte
	if g.Resource == "configmaps" {
		for _, o := range h.configmaps {
			objects = append(objects, o)
		}
	}
	return h.rv, objects, nil
}

// demoPod is pod i of the ~4 KiB shape a real cluster's pods have (labels, annotations,
// two containers with env and requests, volumes, tolerations).
func demoPod(i, namespaces int) []byte {
	env := `[{"name":"POD_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.name"}}},{"name":"POD_NAMESPACE","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}},{"name":"NODE_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"spec.nodeName"}}},{"name":"POD_IP","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"status.podIP"}}},{"name":"LOG_LEVEL","value":"info"},{"name":"REDIS_URL","value":"redis://main:6379/0"}]`
	container := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"image":"registry.k8s.io/pause:3.9","env":%s,"resources":{"requests":{"cpu":"5m","memory":"20M"}},"volumeMounts":[{"name":"config","mountPath":"/etc/config"}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}`, name, env)
	}
	phase := "Running"
	if i%10 == 0 {
		phase = "Pending"
	}
	return []byte(fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"pod-%d","namespace":"demo-%d","uid":"%08x-0000-4000-8000-%012x","creationTimestamp":"2025-01-01T00:00:00Z","labels":{"app.kubernetes.io/name":"payment-service","app.kubernetes.io/instance":"payment-service-primary","app.kubernetes.io/component":"backend","app.kubernetes.io/part-of":"ecommerce-platform","app.kubernetes.io/version":"v2.1.4","env":"production","group":"g-%d","track":"stable"},"annotations":{"prometheus.io/scrape":"false","prometheus.io/port":"8080","prometheus.io/path":"/metrics","sidecar.istio.io/inject":"false","cluster-autoscaler.kubernetes.io/safe-to-evict":"false","fluentbit.io/parser":"json"}},"spec":{"volumes":[{"name":"config","configMap":{"name":"pod-%d","defaultMode":420,"optional":true}}],"containers":[%s,%s],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","nodeName":"node-%d","securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true},"status":{"phase":%q,"podIP":"10.%d.%d.%d","qosClass":"Burstable"}}`,
		i, i%namespaces+1, i, i, i%100, i, container("main"), container("sidecar"), i%50, phase, (i>>16)&255, (i>>8)&255, i&255))
}

// load feeds the objects of an NDJSON file (gzip when it ends in .gz), each at the next
// RV; the resource is the kind's lower-case plural (Pod → pods).
func (h *host) load(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return 0, err
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := json.Unmarshal(line, &head); err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		group, version, ok := strings.Cut(head.APIVersion, "/")
		if !ok {
			group, version = "", head.APIVersion
		}
		h.rv++
		gvr := listwatch.GVR{Group: group, Version: version, Resource: strings.ToLower(head.Kind) + "s"}
		if err := h.lw.Feed.Put(gvr, h.rv, line); err != nil {
			return n, fmt.Errorf("line %d: %w", n+1, err)
		}
		n++
	}
	return n, sc.Err()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8082", "address to serve on")
	demoPods := flag.Int("demo-pods", 0, "seed this many demo pods")
	namespaces := flag.Int("demo-namespaces", 10, "spread demo pods over this many namespaces")
	load := flag.String("load", "", "feed the objects of this NDJSON(.gz) file")
	workers := flag.Int("workers", 2, "threads of listwatch's own runtime")
	h2c := flag.Bool("h2c", true, "also serve HTTP/2 without TLS (prior knowledge), Go 1.24+")
	flag.Parse()

	h := &host{rv: 1, configmaps: map[string][]byte{}}
	lw, err := listwatch.New(listwatch.Config{
		Workers:    *workers,
		StartRV:    1,
		Discovery:  true, // this host has no discovery of its own
		Relist:     h.relist,
		DrainGrace: 2 * time.Second,
		UserFrom: func(r *http.Request) (listwatch.User, bool) {
			u := r.Header.Get("X-Remote-User")
			return listwatch.User{Name: u}, u != ""
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	h.lw = lw
	start := time.Now()
	for i := 0; i < *demoPods; i++ {
		h.rv++
		if err := lw.Feed.Put(listwatch.Pods, h.rv, demoPod(i, *namespaces)); err != nil {
			log.Fatalf("demo pod %d: %v", i, err)
		}
	}
	if *load != "" {
		n, err := h.load(*load)
		if err != nil {
			log.Fatalf("--load %s: %v", *load, err)
		}
		log.Printf("loaded %d objects from %s", n, *load)
	}
	lw.Feed.Progress(h.rv)
	log.Printf("seeded %d demo pods in %v; RV %d", *demoPods, time.Since(start).Round(time.Millisecond), h.rv)

	srv := &http.Server{Addr: *listen, Handler: lw.Wrap(h), ReadHeaderTimeout: 10 * time.Second}
	if *h2c && !serveH2C(srv) {
		log.Printf("-h2c: this Go has no unencrypted HTTP/2 (1.24+); HTTP/1.1 only")
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		log.Printf("shutting down (%d goroutines)", runtime.NumGoroutine())
		_ = lw.Close() // ends open watches, so Shutdown below does not wait on them
		_ = srv.Close()
	}()
	log.Printf("listening on %s", *listen)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
