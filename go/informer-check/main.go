// informer-check: client-go's shared informers (pods and config maps of one namespace)
// against the server a kubeconfig names — listwatch's gateway in the system tests
// (crates/systest/tests/kube_gateway_clients.rs). It waits for the informers to sync, then
// writes through the same client (creates, updates, deletes: passed through to the
// upstream) and checks that each write reaches its informer's store, as a controller
// depends on. Every request is watched on the way (a wrapping RoundTripper): the informers
// must have read with the content type asked for and, with the WatchListClient feature on
// (client-go's env gate `KUBE_FEATURE_WatchListClient`), by a watch-list (a watch with
// sendInitialEvents=true) instead of a LIST.
//
// Built with the Go toolchain and client-go 1.36 of the vendor tree ../shared/k8s/build.sh
// extracts (-mod=vendor; the test says how). Exits 0 with one summary line, or non-zero
// naming each object that never appeared, never changed or never went away, and each
// request that was not what the mode asks for.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// seen records what the informers' requests were: how each collection was first read
// (LIST or watch-list) and which content types came back.
type seen struct {
	mu        sync.Mutex
	lists     map[string]int
	watchList map[string]int
	watches   map[string]int
	types     map[string]int
}

type recorder struct {
	next http.RoundTripper
	seen *seen
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if req.Method != http.MethodGet || err != nil {
		return resp, err
	}
	q := req.URL.Query()
	path := req.URL.Path
	r.seen.mu.Lock()
	defer r.seen.mu.Unlock()
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		if q.Get("sendInitialEvents") == "true" {
			r.seen.watchList[path]++
		} else {
			r.seen.watches[path]++
		}
	default:
		r.seen.lists[path]++
	}
	ct := resp.Header.Get("Content-Type")
	if i := strings.Index(ct, ";"); i >= 0 {
		ct = ct[:i]
	}
	r.seen.types[ct]++
	return resp, err
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig naming the server")
	namespace := flag.String("namespace", "informers", "namespace to write and watch")
	n := flag.Int("n", 20, "objects of each kind to write")
	protobuf := flag.Bool("protobuf", false, "ask for protobuf (else JSON)")
	watchList := flag.Bool("watch-list", false, "expect watch-lists (KUBE_FEATURE_WatchListClient=true)")
	within := flag.Duration("within", 30*time.Second, "how long each write may take to reach a store")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	// Both set either way: client-go 1.36's clientset asks for protobuf unless told otherwise.
	want := "application/json"
	if *protobuf {
		want = "application/vnd.kubernetes.protobuf"
	}
	cfg.ContentType = want
	cfg.AcceptContentTypes = want
	s := &seen{lists: map[string]int{}, watchList: map[string]int{}, watches: map[string]int{}, types: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recorder{next: rt, seen: s} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(*namespace))
	pods := factory.Core().V1().Pods().Informer()
	configMaps := factory.Core().V1().ConfigMaps().Informer()
	factory.Start(ctx.Done())
	start := time.Now()
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	synced := factory.WaitForCacheSync(syncCtx.Done())
	syncCancel()
	for typ, ok := range synced {
		if !ok {
			fail("the %v informer did not sync in 60 s", typ)
		}
	}
	syncTime := time.Since(start)

	var problems []string
	// waitFor polls a store until check holds for every name, and names those it never held for.
	waitFor := func(what string, store cache.Store, names []string, check func(obj interface{}, ok bool) bool) {
		deadline := time.Now().Add(*within)
		for {
			var missing []string
			for _, name := range names {
				obj, ok, _ := store.GetByKey(*namespace + "/" + name)
				if !check(obj, ok) {
					missing = append(missing, name)
				}
			}
			if len(missing) == 0 {
				return
			}
			if time.Now().After(deadline) {
				problems = append(problems, fmt.Sprintf("%s: %d of %d never did within %v: %s",
					what, len(missing), len(names), *within, strings.Join(missing, ",")))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	present := func(_ interface{}, ok bool) bool { return ok }
	absent := func(_ interface{}, ok bool) bool { return !ok }

	var cmNames, podNames []string
	for i := 0; i < *n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"v": "1"}}
		if _, err := client.CoreV1().ConfigMaps(*namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			fail("create configmap %s: %v", cm.Name, err)
		}
		cmNames = append(cmNames, cm.Name)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := client.CoreV1().Pods(*namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			fail("create pod %s: %v", pod.Name, err)
		}
		podNames = append(podNames, pod.Name)
	}
	waitFor("created config maps to appear in the informer's store", configMaps.GetStore(), cmNames, present)
	waitFor("created pods to appear in the informer's store", pods.GetStore(), podNames, present)

	for _, name := range cmNames {
		cm, err := client.CoreV1().ConfigMaps(*namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail("get configmap %s: %v", name, err)
		}
		cm.Data["v"] = "2"
		if _, err := client.CoreV1().ConfigMaps(*namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			fail("update configmap %s: %v", name, err)
		}
	}
	waitFor("updated config maps to show v=2 in the informer's store", configMaps.GetStore(), cmNames,
		func(obj interface{}, ok bool) bool {
			cm, isCM := obj.(*corev1.ConfigMap)
			return ok && isCM && cm.Data["v"] == "2"
		})

	for i := range cmNames {
		if err := client.CoreV1().ConfigMaps(*namespace).Delete(ctx, cmNames[i], metav1.DeleteOptions{}); err != nil {
			fail("delete configmap %s: %v", cmNames[i], err)
		}
		// No kubelet: a pod deleted without a grace period goes at once.
		zero := int64(0)
		if err := client.CoreV1().Pods(*namespace).Delete(ctx, podNames[i], metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			fail("delete pod %s: %v", podNames[i], err)
		}
	}
	waitFor("deleted config maps to leave the informer's store", configMaps.GetStore(), cmNames, absent)
	waitFor("deleted pods to leave the informer's store", pods.GetStore(), podNames, absent)

	s.mu.Lock()
	collections := []string{
		"/api/v1/namespaces/" + *namespace + "/pods",
		"/api/v1/namespaces/" + *namespace + "/configmaps",
	}
	for _, c := range collections {
		switch {
		case *watchList && (s.watchList[c] == 0 || s.lists[c] != 0):
			problems = append(problems, fmt.Sprintf("%s: %d watch-lists and %d LISTs, want a watch-list and no LIST", c, s.watchList[c], s.lists[c]))
		case !*watchList && (s.lists[c] == 0 || s.watchList[c] != 0):
			problems = append(problems, fmt.Sprintf("%s: %d LISTs and %d watch-lists, want a LIST and no watch-list", c, s.lists[c], s.watchList[c]))
		}
		if s.watches[c]+s.watchList[c] == 0 {
			problems = append(problems, c+": never watched")
		}
	}
	var types []string
	for t, count := range s.types {
		types = append(types, fmt.Sprintf("%s=%d", t, count))
		if t != want {
			problems = append(problems, fmt.Sprintf("%d responses were %s, want %s", count, t, want))
		}
	}
	sort.Strings(types)
	s.mu.Unlock()

	if len(problems) > 0 {
		fail("%s", strings.Join(problems, "\n"))
	}
	fmt.Printf("ok: synced in %v; %d config maps and %d pods created, updated and deleted, each seen by its informer; responses %s\n",
		syncTime.Round(time.Millisecond), len(cmNames), len(podNames), strings.Join(types, " "))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "informer-check: "+format+"\n", args...)
	os.Exit(1)
}
