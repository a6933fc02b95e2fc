package listwatch

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ConfigMaps is core/v1 configmaps, what the test hosts write.
var ConfigMaps = GVR{"", "v1", "configmaps"}

// host is a Go apiserver stand-in on net/http alone: listwatch serves reads through
// Wrap, every other request reaches next (which answers 418 so tests can tell).
type host struct {
	lw     *ListWatch
	srv    *httptest.Server
	nexted atomic.Int64
}

func newHost(t *testing.T, cfg Config) *host {
	t.Helper()
	if cfg.UserFrom == nil {
		cfg.UserFrom = func(r *http.Request) (User, bool) {
			u := r.Header.Get("X-Remote-User")
			return User{Name: u, Groups: []string{"system:authenticated"}}, u != ""
		}
	}
	lw, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := &host{lw: lw}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.nexted.Add(1)
		w.WriteHeader(http.StatusTeapot)
	})
	h.srv = httptest.NewServer(lw.Wrap(next))
	t.Cleanup(func() {
		h.srv.CloseClientConnections()
		h.srv.Close()
		_ = lw.Close()
	})
	return h
}

func cm(ns, name, value string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q},"data":{"v":%q}}`, name, ns, value))
}

func get(t *testing.T, url string, accept string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, body
}

// watchEvent is one line of a JSON watch.
type watchEvent struct {
	Type   string `json:"type"`
	Object struct {
		Kind     string `json:"kind"`
		Code     int    `json:"code"`
		Reason   string `json:"reason"`
		Metadata struct {
			Name            string            `json:"name"`
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	} `json:"object"`
}

// watch opens a watch and delivers its events on a channel (closed at the end).
func watch(t *testing.T, url string) (<-chan watchEvent, func()) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("watch %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", url, resp.StatusCode, b)
	}
	ch := make(chan watchEvent, 1024)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				return
			}
			ch <- ev
		}
	}()
	return ch, func() { resp.Body.Close() }
}

// next takes the next event or fails after a generous deadline (a hang guard, not a
// timing assertion).
func next(t *testing.T, ch <-chan watchEvent) watchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch ended early")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30 s")
	}
	return watchEvent{}
}

// The same objects, fed to the Go host and loaded into the standalone server: LIST and
// GET answer byte for byte the same, as JSON and as protobuf.
func TestListAndGetMatchStandalone(t *testing.T) {
	ref, fixture := os.Getenv("LISTWATCH_REFERENCE_URL"), os.Getenv("LISTWATCH_FIXTURE")
	if ref == "" || fixture == "" {
		if os.Getenv("LISTWATCH_REQUIRE_REFERENCE") != "" {
			t.Fatal("LISTWATCH_REFERENCE_URL and LISTWATCH_FIXTURE are required")
		}
		t.Skip("run through crates/ffi/tests/go.rs, which starts the standalone server")
	}
	h := newHost(t, Config{StartRV: 1})
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	// The standalone server gave the objects RVs 2, 3, … in file order; so do we.
	rv := uint64(1)
	var names []string
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		rv++
		if err := h.lw.Feed.Put(Pods, rv, line); err != nil {
			t.Fatalf("put: %v", err)
		}
		var o struct {
			Metadata struct{ Name, Namespace string } `json:"metadata"`
		}
		if err := json.Unmarshal(line, &o); err != nil {
			t.Fatal(err)
		}
		names = append(names, o.Metadata.Namespace+"/pods/"+o.Metadata.Name)
	}
	if len(names) < 100 {
		t.Fatalf("fixture has %d objects", len(names))
	}
	paths := []string{
		"/api/v1/pods",
		"/api/v1/pods?resourceVersion=0",
		"/api/v1/pods?limit=50",
		"/api/v1/namespaces/demo-1/pods?labelSelector=track%3Dcanary",
		"/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3",
		"/api/v1/namespaces/" + names[7],
		"/api/v1/namespaces/demo-1/pods/missing",
	}
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		for _, p := range paths {
			wantCode, wantHdr, want := get(t, ref+p, accept)
			code, hdr, got := get(t, h.srv.URL+p, accept)
			if code != wantCode || !bytes.Equal(got, want) {
				t.Errorf("%s (%s): host %d, %d bytes; standalone %d, %d bytes", p, accept, code, len(got), wantCode, len(want))
			}
			if hdr.Get("Content-Type") != wantHdr.Get("Content-Type") {
				t.Errorf("%s: content type %q, standalone %q", p, hdr.Get("Content-Type"), wantHdr.Get("Content-Type"))
			}
		}
	}
	if h.nexted.Load() != 0 {
		t.Errorf("%d reads reached next", h.nexted.Load())
	}
}

// WATCH and watch-list through Wrap, with live events fed through Feed.
func TestWatchAndWatchListWithLiveEvents(t *testing.T) {
	var initialized atomic.Int64
	h := newHost(t, Config{StartRV: 10, Initialized: func(*http.Request) { initialized.Add(1) }})
	if err := h.lw.Feed.Put(ConfigMaps, 11, cm("a", "one", "1")); err != nil {
		t.Fatal(err)
	}
	h.lw.Feed.Progress(12)

	// GET of one object, and a consistent LIST at the progress RV.
	code, _, body := get(t, h.srv.URL+"/api/v1/namespaces/a/configmaps/one", "")
	if code != 200 || !bytes.Contains(body, []byte(`"resourceVersion":"11"`)) {
		t.Fatalf("GET: %d %s", code, body)
	}
	code, _, body = get(t, h.srv.URL+"/api/v1/configmaps", "")
	if code != 200 || !bytes.Contains(body, []byte(`"resourceVersion":"12"`)) {
		t.Fatalf("LIST: %d %s", code, body)
	}

	w, stop := watch(t, h.srv.URL+"/api/v1/namespaces/a/configmaps?watch=1&resourceVersion=12")
	defer stop()
	wl, stopWL := watch(t, h.srv.URL+"/api/v1/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	defer stopWL()

	// watch-list: the state first, then the end-of-initial-events bookmark.
	if ev := next(t, wl); ev.Type != "ADDED" || ev.Object.Metadata.Name != "one" {
		t.Fatalf("watch-list first event: %+v", ev)
	}
	if ev := next(t, wl); ev.Type != "BOOKMARK" || ev.Object.Metadata.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Fatalf("watch-list bookmark: %+v", ev)
	}
	// GET and LIST ended, both watches have sent what they had: four requests initialized.
	for initialized.Load() < 4 {
		time.Sleep(time.Millisecond)
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.lw.Feed.Put(ConfigMaps, 13, cm("a", "two", "2")))
	must(h.lw.Feed.Put(ConfigMaps, 14, cm("a", "one", "1b")))
	must(h.lw.Feed.Delete(ConfigMaps, 15, "a", "two"))
	must(h.lw.Feed.Apply(ConfigMaps, 16, []Change{{JSON: cm("b", "three", "3")}, {Namespace: "a", Name: "one"}}))
	want := []string{"ADDED two 13", "MODIFIED one 14", "DELETED two 15", "DELETED one 16"}
	for _, ch := range []<-chan watchEvent{w, wl} {
		var got []string
		for len(got) < len(want) {
			ev := next(t, ch)
			if ev.Type == "BOOKMARK" || ev.Object.Metadata.Name == "three" {
				continue
			}
			got = append(got, fmt.Sprintf("%s %s %s", ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("events %v, want %v", got, want)
		}
	}
	if h.lw.Feed.Revision() != 16 {
		t.Errorf("revision %d", h.lw.Feed.Revision())
	}
}

// Writes, unserved paths and discovery (when the host keeps its own) reach next, and
// so does everything after Close.
func TestEverythingElseReachesNext(t *testing.T) {
	h := newHost(t, Config{})
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/namespaces/a/configmaps"},
		{"DELETE", "/api/v1/namespaces/a/configmaps/x"},
		{"GET", "/api/v1/namespaces/a/pods/x/log"},
		{"GET", "/apis/example.com/v1/widgets"},
		{"GET", "/api"},
		{"GET", "/healthz"},
	} {
		req, _ := http.NewRequest(c.method, h.srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Errorf("%s %s: %d, want next's 418", c.method, c.path, resp.StatusCode)
		}
	}
	// Discovery for a host without its own.
	d := newHost(t, Config{Discovery: true})
	if code, _, body := get(t, d.srv.URL+"/api/v1", ""); code != 200 || !bytes.Contains(body, []byte(`"name":"pods"`)) {
		t.Errorf("discovery: %d %s", code, body)
	}
}

// A gap relists through Config.Relist: open watches end with 410 Expired, and the
// relisted state is served; without Relist the host hears ErrNeedsRelist.
func TestGapRelistsAndEndsWatchesWith410(t *testing.T) {
	var relists atomic.Int64
	h := newHost(t, Config{StartRV: 1, Relist: func(g GVR) (uint64, [][]byte, error) {
		relists.Add(1)
		if g != ConfigMaps {
			return 0, nil, errors.New("unexpected resource " + g.String())
		}
		return 50, [][]byte{cm("a", "after", "x")}, nil
	}})
	if err := h.lw.Feed.Put(ConfigMaps, 2, cm("a", "before", "x")); err != nil {
		t.Fatal(err)
	}
	w, stop := watch(t, h.srv.URL+"/api/v1/configmaps?watch=1&resourceVersion=2")
	defer stop()
	if err := h.lw.Feed.Gap(ConfigMaps); err != nil {
		t.Fatalf("gap: %v", err)
	}
	ev := next(t, w)
	if ev.Type != "ERROR" || ev.Object.Code != 410 {
		t.Fatalf("after the gap: %+v", ev)
	}
	// An RV going backwards is inconsistent too: relisted again, reported to the host.
	if err := h.lw.Feed.Put(ConfigMaps, 3, cm("a", "late", "x")); !errors.Is(err, ErrRelisted) {
		t.Fatalf("put behind the relist: %v", err)
	}
	if relists.Load() != 2 {
		t.Errorf("%d relists", relists.Load())
	}
	_, _, body := get(t, h.srv.URL+"/api/v1/configmaps", "")
	if !bytes.Contains(body, []byte(`"name":"after"`)) || bytes.Contains(body, []byte(`"name":"before"`)) {
		t.Errorf("after relist: %s", body)
	}

	bare := newHost(t, Config{StartRV: 1})
	if err := bare.lw.Feed.Gap(ConfigMaps); !errors.Is(err, ErrNeedsRelist) {
		t.Fatalf("gap without Relist: %v", err)
	}
	if err := bare.lw.Feed.Relisted(ConfigMaps, 7, [][]byte{cm("z", "only", "1")}); err != nil {
		t.Fatalf("relisted: %v", err)
	}
	if _, _, body := get(t, bare.srv.URL+"/api/v1/configmaps", ""); !bytes.Contains(body, []byte(`"name":"only"`)) {
		t.Errorf("relisted state: %s", body)
	}
	if err := bare.lw.Feed.Put(GVR{"", "v1", "nothings"}, 8, cm("a", "b", "c")); err == nil {
		t.Error("a put to an unserved resource was accepted")
	}
}

// osThreads is this process's thread count.
func osThreads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// 1,000 watches open at once hold no thread each, and every one gets a fed event.
func TestThousandConcurrentWatches(t *testing.T) {
	const n = 1000
	h := newHost(t, Config{StartRV: 1})
	before := osThreads(t)
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var opened, got sync.WaitGroup
	opened.Add(n)
	got.Add(n)
	var failures atomic.Int64
	bodies := make(chan io.Closer, n)
	for i := 0; i < n; i++ {
		go func() {
			defer got.Done()
			resp, err := client.Get(h.srv.URL + "/api/v1/namespaces/w/configmaps?watch=1&resourceVersion=1")
			opened.Done()
			if err != nil {
				failures.Add(1)
				return
			}
			bodies <- resp.Body
			line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
			if err != nil || !bytes.Contains(line, []byte(`"name":"ping"`)) {
				failures.Add(1)
			}
		}()
	}
	opened.Wait()
	// Every watch is open (its headers arrived) before the event is fed.
	if err := h.lw.Feed.Put(ConfigMaps, 2, cm("w", "ping", "1")); err != nil {
		t.Fatal(err)
	}
	got.Wait()
	during := osThreads(t)
	close(bodies)
	for b := range bodies {
		b.Close()
	}
	if failures.Load() != 0 {
		t.Fatalf("%d of %d watches failed", failures.Load(), n)
	}
	// Blocked cgo calls would take one thread per watch; parked goroutines take none.
	if during-before > 100 {
		t.Errorf("threads grew from %d to %d with %d watches open", before, during, n)
	}
	t.Logf("OS threads: %d before, %d with %d watches", before, during, n)
}

// A client that stops reading holds up only its own watch: the others get every event,
// and the stalled one, once it reads again, gets them all in order.
func TestStalledReader(t *testing.T) {
	h := newHost(t, Config{StartRV: 1})
	addr := strings.TrimPrefix(h.srv.URL, "http://")
	// A small receive buffer, set before connecting so the window is negotiated with it:
	// the server's writes block soon after the client stops reading.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16384)
		})
	}}
	conn, err := dialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/namespaces/s/configmaps?watch=1&resourceVersion=1 HTTP/1.1\r\nHost: x\r\n\r\n")

	live, stop := watch(t, h.srv.URL+"/api/v1/namespaces/s/configmaps?watch=1&resourceVersion=1")
	defer stop()
	// ~8 MiB of events: far more than the stalled connection's socket buffers hold.
	const events = 2000
	pad := strings.Repeat("x", 4096)
	for i := 0; i < events; i++ {
		if err := h.lw.Feed.Put(ConfigMaps, uint64(i+2), cm("s", fmt.Sprintf("cm-%d", i%50), pad)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < events; i++ {
		ev := next(t, live)
		if want := strconv.Itoa(i + 2); ev.Object.Metadata.ResourceVersion != want {
			t.Fatalf("live watcher: event %d at RV %s, want %s", i, ev.Object.Metadata.ResourceVersion, want)
		}
	}
	// Now the stalled client reads: every event, in order.
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(resp.Body)
	for i := 0; i < events; i++ {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("stalled watcher: event %d: %v", i, err)
		}
		if want := strconv.Itoa(i + 2); ev.Object.Metadata.ResourceVersion != want {
			t.Fatalf("stalled watcher: event %d at RV %s, want %s", i, ev.Object.Metadata.ResourceVersion, want)
		}
	}
}

// Close with watches open ends every watch (a clean end of stream), returns, and hands
// later requests to next.
func TestCloseWithWatchesOpen(t *testing.T) {
	lw, err := New(Config{StartRV: 1, DrainGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(lw.Wrap(next))
	defer srv.Close()
	var ended sync.WaitGroup
	for i := 0; i < 20; i++ {
		w, stop := watch(t, srv.URL+"/api/v1/configmaps?watch=1&resourceVersion=1")
		defer stop()
		ended.Add(1)
		go func() {
			defer ended.Done()
			for range w {
			}
		}()
	}
	if err := lw.Feed.Put(ConfigMaps, 2, cm("c", "x", "1")); err != nil {
		t.Fatal(err)
	}
	if err := lw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	done := make(chan struct{})
	go func() { ended.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("watches still open after Close")
	}
	if code, _, _ := get(t, srv.URL+"/api/v1/configmaps", ""); code != http.StatusTeapot {
		t.Errorf("after Close: %d, want next's 418", code)
	}
	if err := lw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A bad configuration is an error naming the cause, not a crash.
func TestBadConfig(t *testing.T) {
	_, err := New(Config{Resources: json.RawMessage(`[{"group":"x"}]`)})
	if err == nil || !strings.Contains(err.Error(), "configuration") {
		t.Fatalf("bad resources: %v", err)
	}
}

// The server tunables reach the instance: a per-user watch cap of 2 refuses the user's
// third watch with 429 (listwatch's default is 10,000) while another user still gets one,
// and a bookmark period of 200 ms sends a watch that asked for bookmarks one within
// seconds of the store moving (the default period is a minute).
func TestServerConfigReachesTheServer(t *testing.T) {
	// ProtobufShareBytes has no effect to see here; set, it must be a key the library takes.
	h := newHost(t, Config{StartRV: 1, Server: ServerConfig{MaxWatchesPerUser: 2,
		BookmarkInterval: 200 * time.Millisecond, ProtobufShareBytes: 8 << 20}})
	open := func(user, query string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, h.srv.URL+"/api/v1/namespaces/w/configmaps?watch=1&resourceVersion=1"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Remote-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("watch as %s: %v", user, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	first := open("u", "&allowWatchBookmarks=true")
	second := open("u", "")
	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusOK {
		t.Fatalf("first two watches: %d %d", first.StatusCode, second.StatusCode)
	}
	if third := open("u", ""); third.StatusCode != http.StatusTooManyRequests {
		t.Errorf("third watch of one user: %d, want 429 (MaxWatchesPerUser 2)", third.StatusCode)
	}
	if other := open("v", ""); other.StatusCode != http.StatusOK {
		t.Errorf("another user's watch: %d", other.StatusCode)
	}
	// kube-apiserver sends a periodic bookmark only once the store has moved past the RV the
	// watch started from: a change in another namespace moves it, and is no event here.
	if err := h.lw.Feed.Put(ConfigMaps, 2, cm("elsewhere", "moved", "1")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		var ev watchEvent
		if err := json.NewDecoder(first.Body).Decode(&ev); err == nil {
			got <- ev.Type
		}
		close(got)
	}()
	select {
	case typ := <-got:
		if typ != "BOOKMARK" {
			t.Errorf("first event of the watch: %q, want BOOKMARK", typ)
		}
	case <-time.After(20 * time.Second):
		t.Error("no bookmark within 20 s with BookmarkInterval 200 ms")
	}
}

// countingWriter stands for a host's wrapping ResponseWriter (kube-apiserver's tracing
// allocates on every call): it counts the calls that reach it.
type countingWriter struct {
	http.ResponseWriter
	writes, flushes int
}

func (c *countingWriter) Write(b []byte) (int, error) { c.writes++; return c.ResponseWriter.Write(b) }
func (c *countingWriter) Flush()                      { c.flushes++; c.ResponseWriter.(http.Flusher).Flush() }

// A LIST in small chunks (16 KiB, as the fork has them) reaches the host's writer in
// buffers of several chunks, and is flushed when the stream waits, not per chunk.
func TestSmallChunksAreWrittenTogether(t *testing.T) {
	lw, err := New(Config{StartRV: 1, Server: ServerConfig{ChunkBytes: 16 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lw.Close() })
	const items = 500
	value := strings.Repeat("v", 3<<10)
	for i := 0; i < items; i++ {
		if err := lw.Feed.Put(ConfigMaps, uint64(i+2), cm("n", fmt.Sprintf("c%03d", i), value)); err != nil {
			t.Fatal(err)
		}
	}
	var counted *countingWriter
	handler := lw.Wrap(http.NotFoundHandler())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counted = &countingWriter{ResponseWriter: w}
		handler.ServeHTTP(counted, r)
	}))
	t.Cleanup(srv.Close)
	code, _, body := get(t, srv.URL+"/api/v1/configmaps", "application/json")
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.Items) != items {
		t.Fatalf("LIST: %d, %d items, %v", code, len(list.Items), err)
	}
	// 64 KiB buffers take three chunks of 16 KiB (and a bit): a chunk at a time made 101.
	if most := len(body)/(40<<10) + 2; counted.writes > most {
		t.Errorf("%d writes for %d bytes in %d items, want at most %d", counted.writes, len(body), items, most)
	}
	if counted.flushes > 2 {
		t.Errorf("%d flushes for one LIST that never waited, want at most 2", counted.flushes)
	}
}

// etcdPut writes key=value through etcd's JSON gateway (standard library only).
func etcdPut(t *testing.T, etcd, key, value string) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, b64([]byte(key)), b64([]byte(value)))
	resp, err := http.Post(etcd+"/v3/kv/put", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		out, _ := io.ReadAll(resp.Body)
		t.Fatalf("etcd put %s: %d %s", key, resp.StatusCode, out)
	}
}

// The etcd source through the Go package: an instance configured with EtcdConfig follows
// kube-apiserver's key layout in a real etcd (started by crates/ffi/tests/go.rs, which
// requires this test to have run); Wrap serves a LIST of what was stored and a watch sees
// a key written to etcd afterwards.
func TestEtcdSource(t *testing.T) {
	etcd := os.Getenv("LISTWATCH_TEST_ETCD")
	if etcd == "" {
		t.Skip("LISTWATCH_TEST_ETCD unset: crates/ffi/tests/go.rs starts etcd and sets it")
	}
	etcdPut(t, etcd, "/registry/configmaps/e/before", string(cm("e", "before", "1")))
	h := newHost(t, Config{Etcd: &EtcdConfig{Servers: []string{etcd}}})
	// The followers list etcd at start: poll until the LIST has the object (readiness).
	var body []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		var code int
		code, _, body = get(t, h.srv.URL+"/api/v1/namespaces/e/configmaps", "")
		if code == 200 && bytes.Contains(body, []byte(`"name":"before"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LIST from etcd: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Readiness and metrics for the host's own endpoints (the fork's /readyz and /metrics),
	// although this host does not serve listwatch's discovery paths.
	for err := h.lw.Ready(); err != nil; err = h.lw.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("Ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _, _ := get(t, h.srv.URL+"/readyz", ""); code != http.StatusTeapot {
		t.Fatalf("/readyz reached listwatch without Config.Discovery: %d", code)
	}
	metrics, err := h.lw.Metrics()
	if err != nil || !bytes.Contains(metrics, []byte(`apiserver_request_total{verb="LIST",resource="configmaps"`)) {
		t.Fatalf("Metrics: %v\n%s", err, metrics)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	w, stop := watch(t, h.srv.URL+"/api/v1/namespaces/e/configmaps?watch=1&resourceVersion="+list.Metadata.ResourceVersion)
	defer stop()
	etcdPut(t, etcd, "/registry/configmaps/e/after", string(cm("e", "after", "2")))
	ev := next(t, w)
	if ev.Type != "ADDED" || ev.Object.Metadata.Name != "after" {
		t.Fatalf("watch from etcd: %+v", ev)
	}
	// A consistent GET reads it too.
	if code, _, body := get(t, h.srv.URL+"/api/v1/namespaces/e/configmaps/after", ""); code != 200 {
		t.Fatalf("GET: %d %s", code, body)
	}
}

// The fork turns kube-apiserver's watch cache off for exactly these names, so they must be
// --watch-cache-sizes' spelling of storage resources: resource[.group], each once, with no
// version and none of the views (events.k8s.io events, autoscaling/v1 HPAs) that share
// another resource's storage.
func TestBuiltinResources(t *testing.T) {
	names := BuiltinResources()
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "/#, ") || seen[n] {
			t.Fatalf("bad or repeated name %q in %q", n, names)
		}
		seen[n] = true
	}
	for _, want := range []string{"pods", "secrets", "events", "deployments.apps",
		"horizontalpodautoscalers.autoscaling", "leases.coordination.k8s.io",
		"customresourcedefinitions.apiextensions.k8s.io", "apiservices.apiregistration.k8s.io"} {
		if !seen[want] {
			t.Errorf("%q missing from %q", want, names)
		}
	}
	for _, view := range []string{"events.events.k8s.io", "horizontalpodautoscalers"} {
		if seen[view] {
			t.Errorf("%q is a view of another resource's storage, not a cache of its own", view)
		}
	}
	t.Logf("%d resources: %s", len(names), strings.Join(names, ","))
}
