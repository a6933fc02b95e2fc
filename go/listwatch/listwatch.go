// Package listwatch embeds listwatch — the Kubernetes read path (LIST, GET, WATCH and
// watch-list), wire-compatible with kube-apiserver — in a Go HTTP server such as a
// kube-apiserver fork, through the C ABI of crates/ffi (a Rust static library).
//
//	lw, err := listwatch.New(listwatch.Config{UserFrom: userFromContext})
//	handler = lw.Wrap(handler)               // reads of served resources → listwatch
//	lw.Feed.Put(listwatch.Pods, rv, json)    // every change the host commits, in order
//	defer lw.Close()
//
// Responses stream without a thread per request: a response that has nothing to send
// parks its goroutine on a channel, and one goroutine per instance waits on the
// library's notification pipe through Go's netpoller (docs/embedding-go.md).
//
// Build: the static library comes from `cargo build --release -p listwatch-ffi`; point
// the linker at it with CGO_LDFLAGS=-L<target>/release (the example's run script and
// scripts/test do).
package listwatch

/*
#cgo CFLAGS: -I${SRCDIR}/../../crates/ffi/include
#cgo LDFLAGS: -llistwatch_ffi -lm -ldl -lpthread
#include <stdlib.h>
#include "listwatch.h"
*/
import "C"

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// User is the already-authenticated user a request is served for.
type User struct {
	Name   string
	Groups []string
}

// GVR names a served resource: {"", "v1", "pods"}, {"apps", "v1", "deployments"}.
type GVR struct {
	Group, Version, Resource string
}

// Pods is core/v1 pods.
var Pods = GVR{"", "v1", "pods"}

func (g GVR) String() string { return g.Group + "/" + g.Version + "/" + g.Resource }

// EtcdConfig makes listwatch follow etcd itself instead of being fed by the host; the
// fields are kube-apiserver's flags of the same names. Needs a library built with the
// `etcd` feature.
type EtcdConfig struct {
	Servers                  []string // --etcd-servers
	CAFile                   string   // --etcd-cafile
	CertFile                 string   // --etcd-certfile
	KeyFile                  string   // --etcd-keyfile
	EncryptionProviderConfig string   // --encryption-provider-config
}

// Config configures an instance.
type Config struct {
	// Workers is the number of threads of the instance's own runtime (timers, etcd
	// followers); 0 means 2. Requests are encoded on the goroutines serving them.
	Workers int
	// StartRV is the RV the caches start at; the first change fed must be after it.
	StartRV uint64
	// Resources is listwatch's resource list as JSON (ResourceInfo objects); nil serves
	// the built-in resources.
	Resources json.RawMessage
	// Etcd, when set, makes listwatch follow etcd; nil: the host feeds changes (Feed).
	Etcd *EtcdConfig
	// UserFrom returns the already-authenticated user of a request (in kube-apiserver:
	// request.UserFrom(r.Context())). Authorization is the host's: its filter chain has
	// decided before Wrap's handler runs.
	UserFrom func(*http.Request) (User, bool)
	// Relist returns a resource's full state, read at rv, when the fed stream cannot be
	// trusted any more (a gap, an RV going backwards). Without it those Feed calls return
	// ErrNeedsRelist and the host calls Feed.Relisted itself.
	Relist func(GVR) (rv uint64, objects [][]byte, err error)
	// Discovery also answers /api, /apis, /version, health and /metrics for the served
	// resources: for hosts without discovery of their own (an apiserver fork leaves it off).
	Discovery bool
	// DrainGrace spreads the end of open watches on Close over this period.
	DrainGrace time.Duration
	// Server holds the serving tunables (admission caps, chunk size, bookmark period);
	// its zero value keeps listwatch's defaults.
	Server ServerConfig
	// Initialized, when set, is called once per served request when what it had to send
	// at its start has been written and flushed (a watch-list's initial events, a watch's
	// headers) or the response ended. In kube-apiserver: signal priority-and-fairness
	// that the watch is initialized (flowcontrol.WatchInitialized(r.Context())), so it
	// stops holding a seat for it.
	Initialized func(*http.Request)
}

// NoLimit, as a cap of ServerConfig, lifts that cap.
const NoLimit = -1

// ServerConfig holds listwatch's serving tunables. A zero field keeps listwatch's default
// (in brackets); NoLimit lifts a cap.
type ServerConfig struct {
	MaxLists             int           // LISTs and watch-lists streaming at once [400]
	MaxWatches           int           // watches open at once [100,000]
	MaxListsPerUser      int           // LISTs and watch-lists streaming per user [100]
	MaxWatchesPerUser    int           // watches open per user [10,000]
	ResponseBufferBudget int           // bytes all streaming LISTs may buffer, two chunks each [256 MiB]
	ChunkBytes           int           // bytes of one response chunk at most [64 KiB]
	BookmarkInterval     time.Duration // period of bookmarks on watches that asked for them [60 s]
	ProtobufShareBytes   int           // bytes of protobuf items kept for concurrent LISTs to share [32 MiB]; NoLimit: none
}

// wire is the JSON of the library's "server" section: absent keeps the default, 0 is no cap.
func (s ServerConfig) wire() map[string]any {
	m := map[string]any{}
	limit := func(name string, v int) {
		switch {
		case v < 0:
			m[name] = 0
		case v > 0:
			m[name] = v
		}
	}
	limit("maxLists", s.MaxLists)
	limit("maxWatches", s.MaxWatches)
	limit("maxListsPerUser", s.MaxListsPerUser)
	limit("maxWatchesPerUser", s.MaxWatchesPerUser)
	limit("responseBufferBudgetBytes", s.ResponseBufferBudget)
	if s.ChunkBytes > 0 {
		m["chunkBytes"] = s.ChunkBytes
	}
	if s.BookmarkInterval > 0 {
		m["bookmarkIntervalMs"] = s.BookmarkInterval.Milliseconds()
	}
	limit("protobufShareBytes", s.ProtobufShareBytes)
	return m
}

// ListWatch is a running instance. Its Feed takes the host's committed changes.
type ListWatch struct {
	// Feed takes the changes the host commits (host-fed instances).
	Feed Feed

	cfg   Config
	inst  *C.LwInstance
	flags C.uint32_t

	notify     *os.File
	dispatched chan struct{} // closed when the dispatcher has stopped

	mu      sync.Mutex
	closed  bool
	waiters map[uint64]chan struct{}
	active  sync.WaitGroup
	closing chan struct{} // closed when streams still open after Close must give up

	life  sync.RWMutex // held (shared) by Feed calls; Close frees the instance under it
	freed bool

	writeBuffers sync.Pool // pump's gathering buffers, shared by the instance's responses
}

// Error is a failure reported by the library.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("listwatch (%d): %s", e.Code, e.Message) }

// Is makes errors.Is(err, ErrRelisted) and errors.Is(err, ErrNeedsRelist) work.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

var (
	// ErrRelisted: the fed change did not follow what was fed before; the resource was
	// replaced by its relisted state and its open watches ended with 410.
	ErrRelisted = &Error{Code: int(C.LW_RELISTED)}
	// ErrClosed: the instance was closed.
	ErrClosed = errors.New("listwatch: closed")
	// ErrNeedsRelist: the resource's stream is inconsistent and Config.Relist is not
	// set: pass its full state to Feed.Relisted.
	ErrNeedsRelist = &Error{Code: int(C.LW_NEEDS_RELIST)}
)

// takeErr turns a code and a library-allocated message into an error (nil for LW_OK).
func takeErr(rc C.int32_t, msg *C.char) error {
	text := ""
	if msg != nil {
		text = C.GoString(msg)
		C.lw_string_free(msg)
	}
	if rc == C.LW_OK {
		return nil
	}
	if text == "" {
		text = "failed"
	}
	return &Error{Code: int(rc), Message: text}
}

// BuiltinResources are the built-in resources listwatch serves, each as
// kube-apiserver's --watch-cache-sizes names it: resource[.group], once however many
// versions it has. A host that lets listwatch serve them can turn its own caches off for
// exactly these.
func BuiltinResources() []string {
	var out *C.char
	if C.lw_builtin_resources(&out) != C.LW_OK || out == nil {
		return nil
	}
	defer C.lw_string_free(out)
	return strings.Split(C.GoString(out), "\n")
}

type wireConfig struct {
	Workers   int             `json:"workers,omitempty"`
	StartRV   uint64          `json:"startRv,omitempty"`
	Resources json.RawMessage `json:"resources,omitempty"`
	Source    map[string]any  `json:"source"`
	Server    map[string]any  `json:"server,omitempty"`
}

// New starts an instance: its runtime, its caches, and (with Etcd) its etcd followers.
func New(cfg Config) (*ListWatch, error) {
	wc := wireConfig{Workers: cfg.Workers, StartRV: cfg.StartRV, Resources: cfg.Resources,
		Source: map[string]any{"hostFed": map[string]any{}}, Server: cfg.Server.wire()}
	if e := cfg.Etcd; e != nil {
		opt := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		wc.Source = map[string]any{"etcd": map[string]any{
			"endpoints": e.Servers, "caFile": opt(e.CAFile), "certFile": opt(e.CertFile),
			"keyFile": opt(e.KeyFile), "encryptionProviderConfig": opt(e.EncryptionProviderConfig),
		}}
	}
	text, err := json.Marshal(wc)
	if err != nil {
		return nil, err
	}
	var inst *C.LwInstance
	var msg *C.char
	rc := C.lw_new((*C.uint8_t)(unsafe.Pointer(&text[0])), C.size_t(len(text)), &inst, &msg)
	if err := takeErr(rc, msg); err != nil {
		return nil, err
	}
	lw := &ListWatch{cfg: cfg, inst: inst, waiters: map[uint64]chan struct{}{},
		dispatched: make(chan struct{}), closing: make(chan struct{})}
	lw.writeBuffers.New = newWriteBuffer
	lw.Feed.lw = lw
	if cfg.Discovery {
		lw.flags = C.LW_HANDLE_DISCOVERY
	}
	// Our own descriptor for the pipe (the instance keeps its own): non-blocking, so
	// os.NewFile registers it with the netpoller and the dispatcher holds no thread.
	fd, err := syscall.Dup(int(C.lw_notify_fd(inst)))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		C.lw_free(inst)
		return nil, fmt.Errorf("listwatch: notification pipe: %w", err)
	}
	lw.notify = os.NewFile(uintptr(fd), "listwatch-notify")
	go lw.dispatch()
	return lw, nil
}

// dispatch wakes the goroutines whose streams can make progress.
func (lw *ListWatch) dispatch() {
	defer close(lw.dispatched)
	buf := make([]byte, 512)
	ids := make([]C.uint64_t, 1024)
	for {
		if _, err := lw.notify.Read(buf); err != nil {
			return // closed by Close
		}
		for {
			n := int(C.lw_ready(lw.inst, &ids[0], C.size_t(len(ids))))
			if n <= 0 {
				break
			}
			lw.mu.Lock()
			for _, id := range ids[:n] {
				if ch, ok := lw.waiters[uint64(id)]; ok {
					select {
					case ch <- struct{}{}:
					default: // already woken
					}
				}
			}
			lw.mu.Unlock()
			if n < len(ids) {
				break
			}
		}
	}
}

// Wrap serves GET, LIST, WATCH and watch-list of the resources listwatch serves and
// hands every other request to next. Put it after the host's authentication,
// authorization, fairness and audit filters. After Close every request goes to next.
func (lw *ListWatch) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only GETs can be reads: everything else goes to the host without a cgo call.
		if r.Method != http.MethodGet || !lw.serve(w, r, lw.flags) {
			next.ServeHTTP(w, r)
		}
	})
}

// cbytes points C at a Go string's bytes (C does not keep them past the call).
func cbytes(s string) (*C.uint8_t, C.size_t) {
	if s == "" {
		return nil, 0
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// serve answers r when listwatch serves it (with flags for lw_handle); false hands it
// back untouched.
func (lw *ListWatch) serve(w http.ResponseWriter, r *http.Request, flags C.uint32_t) bool {
	lw.mu.Lock()
	if lw.closed {
		lw.mu.Unlock()
		return false
	}
	lw.active.Add(1)
	lw.mu.Unlock()
	defer lw.active.Done()

	var hdr strings.Builder
	for name, values := range r.Header {
		for _, v := range values {
			hdr.WriteString(name)
			hdr.WriteString(": ")
			hdr.WriteString(v)
			hdr.WriteString("\r\n")
		}
	}
	var user User
	if lw.cfg.UserFrom != nil {
		user, _ = lw.cfg.UserFrom(r)
	}
	method, methodLen := cbytes(r.Method)
	uri, uriLen := cbytes(r.URL.RequestURI())
	headers, headersLen := cbytes(hdr.String())
	name, nameLen := cbytes(user.Name)
	groups, groupsLen := cbytes(strings.Join(user.Groups, "\n"))
	var stream *C.LwStream
	var id C.uint64_t
	rc := C.lw_handle(lw.inst, method, methodLen, uri, uriLen, headers, headersLen,
		name, nameLen, groups, groupsLen, flags, &stream, &id)
	switch rc {
	case C.LW_NOT_HANDLED:
		return false
	case C.LW_OK:
	default:
		http.Error(w, fmt.Sprintf("listwatch: request refused (%d)", rc), http.StatusBadRequest)
		return true
	}
	defer C.lw_stream_free(stream)

	wake := make(chan struct{}, 1)
	lw.mu.Lock()
	lw.waiters[uint64(id)] = wake
	lw.mu.Unlock()
	defer func() {
		lw.mu.Lock()
		delete(lw.waiters, uint64(id))
		lw.mu.Unlock()
	}()
	lw.pump(w, r, stream, wake)
	return true
}

// pump moves the response from the stream to w: the head, then the body, written as the
// stream yields it — the client's pace is the encoder's, since Write blocks while the
// connection cannot take more. Small chunks (a LIST item, an event) are gathered in a
// pooled buffer and written together, flushed only when the stream has nothing more for
// now: a host's handler chain wraps w (kube-apiserver's tracing allocates on every Write
// and Flush), and one call per item made garbage at the rate of the LIST.
func (lw *ListWatch) pump(w http.ResponseWriter, r *http.Request, stream *C.LwStream, wake chan struct{}) {
	rc := http.NewResponseController(w)
	var frame C.LwFrame
	wroteHead, unflushed := false, false
	initialized := false
	initDone := func() {
		if !initialized && lw.cfg.Initialized != nil {
			initialized = true
			lw.cfg.Initialized(r)
		}
	}
	defer initDone()
	// The gathering buffer, taken from the pool at the first chunk and given back before
	// the goroutine parks: an idle watch holds none.
	var gathered *[]byte
	defer func() {
		if gathered != nil {
			lw.writeBuffers.Put(gathered)
		}
	}()
	// writeGathered writes what is gathered (false: the client is gone).
	writeGathered := func() bool {
		if gathered == nil || len(*gathered) == 0 {
			return true
		}
		_, err := w.Write(*gathered)
		*gathered = (*gathered)[:0]
		unflushed = true
		return err == nil
	}
	for {
		// Polled after the waiter is registered: a wake-up before that is not lost.
		switch code := C.lw_stream_poll(stream, &frame); code {
		case C.LW_PENDING:
			// Nothing more to send for now: what is gathered or buffered (a watch's
			// headers) goes out before the goroutine parks.
			if !writeGathered() {
				return
			}
			if gathered != nil {
				lw.writeBuffers.Put(gathered)
				gathered = nil
			}
			if unflushed {
				if err := rc.Flush(); err != nil {
					return
				}
				unflushed = false
			}
			initDone()
			select {
			case <-wake:
			case <-r.Context().Done():
				return // the client went away
			case <-lw.closing:
				panic(http.ErrAbortHandler)
			}
		case C.LW_HEAD:
			lines := C.GoStringN((*C.char)(unsafe.Pointer(frame.data)), C.int(frame.len))
			h := w.Header()
			for _, line := range strings.Split(lines, "\r\n") {
				if k, v, ok := strings.Cut(line, ": "); ok {
					h.Add(k, v)
				}
			}
			w.WriteHeader(int(frame.status))
			wroteHead, unflushed = true, true
		case C.LW_DATA:
			// The chunk is the stream's memory, valid until the next poll: copied into the
			// gathering buffer, or (a large one) written before polling again.
			chunk := unsafe.Slice((*byte)(unsafe.Pointer(frame.data)), int(frame.len))
			if gathered != nil && len(*gathered)+len(chunk) > cap(*gathered) && !writeGathered() {
				return
			}
			if len(chunk) >= writeBufferBytes {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				unflushed = true
			} else {
				if gathered == nil {
					gathered = lw.writeBuffers.Get().(*[]byte)
				}
				*gathered = append(*gathered, chunk...)
			}
		case C.LW_END:
			// The rest goes out as the handler returns.
			writeGathered()
			return
		default:
			if !wroteHead {
				http.Error(w, fmt.Sprintf("listwatch: response failed (%d)", code), http.StatusInternalServerError)
				return
			}
			// Mid-body: break the connection so the client sees an incomplete response.
			panic(http.ErrAbortHandler)
		}
	}
}

// writeBufferBytes is the size of pump's gathering buffers: listwatch's default chunk, or
// three of the fork's 16 KiB chunks.
const writeBufferBytes = 64 << 10

// newWriteBuffer makes one of pump's gathering buffers (for ListWatch.writeBuffers).
func newWriteBuffer() any {
	b := make([]byte, 0, writeBufferBytes)
	return &b
}

// Ready reports listwatch's own readiness (its /readyz: the source is healthy and every
// served resource's cache is trusted by it): nil when ready, else an error carrying the
// failing checks. For a host's readiness endpoint (the kube-apiserver fork adds it to
// /readyz), whatever Config.Discovery says.
func (lw *ListWatch) Ready() error {
	status, body, err := lw.get("/readyz?verbose")
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("listwatch not ready (%d): %s", status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Metrics returns listwatch's metrics in Prometheus' text format (its /metrics), for a
// host that adds them to its own, whatever Config.Discovery says.
func (lw *ListWatch) Metrics() ([]byte, error) {
	status, body, err := lw.get("/metrics")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("listwatch /metrics: %d", status)
	}
	return body, nil
}

// get answers one of listwatch's own discovery paths in memory (bounded by 10 s).
func (lw *ListWatch) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, nil, err
	}
	rec := &recorder{header: http.Header{}}
	if !lw.serve(rec, r, C.LW_HANDLE_DISCOVERY) {
		return 0, nil, ErrClosed
	}
	if ctx.Err() != nil {
		return 0, nil, fmt.Errorf("listwatch %s: %w", path, ctx.Err())
	}
	return rec.status, rec.body.Bytes(), nil
}

// recorder is the in-memory ResponseWriter of get.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
func (r *recorder) Flush() {}

// Close ends open watches (spread over Config.DrainGrace), stops the instance's
// background work, waits for open responses to finish (at most DrainGrace + 10 s: a
// client that stopped reading is then cut off) and frees the instance. From then on
// Wrap hands every request to next.
func (lw *ListWatch) Close() error {
	lw.mu.Lock()
	if lw.closed {
		lw.mu.Unlock()
		return nil
	}
	lw.closed = true
	lw.mu.Unlock()
	rc := C.lw_close(lw.inst, C.uint64_t(lw.cfg.DrainGrace.Milliseconds()))
	done := make(chan struct{})
	go func() { lw.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(lw.cfg.DrainGrace + 10*time.Second):
	}
	close(lw.closing)
	lw.notify.Close()
	<-lw.dispatched
	// Streams still being written hold their own reference to the instance's state.
	lw.life.Lock()
	C.lw_free(lw.inst)
	lw.freed = true
	lw.life.Unlock()
	if rc != C.LW_OK {
		return &Error{Code: int(rc), Message: "close"}
	}
	return nil
}

// live takes the instance's shared lock and reports whether it is still there; the
// caller unlocks when it is.
func (lw *ListWatch) live() bool {
	lw.life.RLock()
	if lw.freed {
		lw.life.RUnlock()
		return false
	}
	return true
}

// Feed takes the changes the host commits, each with the RV it committed at, in commit
// order (RVs are one counter across resources, like etcd revisions).
type Feed struct{ lw *ListWatch }

// Change is one change of a transaction (Feed.Apply): a Put (JSON set) or a delete.
type Change struct {
	JSON            []byte // the object (a put); nil for a delete
	Namespace, Name string // the deleted object
}

// result finishes a feed call (the caller holds the shared lock): on an inconsistent
// stream it relists through Config.Relist and reports ErrRelisted.
func (f Feed) result(gvr GVR, rc C.int32_t, msg *C.char) error {
	err := takeErr(rc, msg)
	if rc == C.LW_NEEDS_RELIST && f.lw.cfg.Relist != nil {
		rv, objects, rerr := f.lw.cfg.Relist(gvr)
		if rerr != nil {
			return fmt.Errorf("%w; relist: %v", err, rerr)
		}
		if err := f.relisted(gvr, rv, objects); err != nil {
			return err
		}
		return ErrRelisted
	}
	return err
}

// Put feeds an object created or updated at rv (its JSON; listwatch writes rv into
// metadata.resourceVersion).
func (f Feed) Put(gvr GVR, rv uint64, object []byte) error {
	if !f.lw.live() {
		return ErrClosed
	}
	defer f.lw.life.RUnlock()
	g, gl := cbytes(gvr.String())
	var msg *C.char
	var p *C.uint8_t
	if len(object) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&object[0]))
	}
	rc := C.lw_feed_put(f.lw.inst, g, gl, C.uint64_t(rv), p, C.size_t(len(object)), &msg)
	return f.result(gvr, rc, msg)
}

// Delete feeds the deletion of namespace/name ("" namespace: cluster-scoped) at rv.
func (f Feed) Delete(gvr GVR, rv uint64, namespace, name string) error {
	if !f.lw.live() {
		return ErrClosed
	}
	defer f.lw.life.RUnlock()
	g, gl := cbytes(gvr.String())
	ns, nsl := cbytes(namespace)
	n, nl := cbytes(name)
	var msg *C.char
	rc := C.lw_feed_delete(f.lw.inst, g, gl, C.uint64_t(rv), ns, nsl, n, nl, &msg)
	return f.result(gvr, rc, msg)
}

// packed lays byte strings end to end with their lengths, as the C ABI takes them.
func packed(items [][]byte) ([]byte, []C.size_t) {
	total := 0
	for _, it := range items {
		total += len(it)
	}
	buf := make([]byte, 0, total+1) // +1: &buf[0] exists even when every item is empty
	lens := make([]C.size_t, len(items)+1)
	for i, it := range items {
		buf = append(buf, it...)
		lens[i] = C.size_t(len(it))
	}
	return buf[:cap(buf)], lens
}

// Apply feeds changes committed together at rv (one transaction).
func (f Feed) Apply(gvr GVR, rv uint64, changes []Change) error {
	if !f.lw.live() {
		return ErrClosed
	}
	defer f.lw.life.RUnlock()
	kinds := make([]byte, len(changes)+1)
	items := make([][]byte, len(changes))
	for i, c := range changes {
		if c.JSON != nil {
			items[i] = c.JSON
		} else {
			kinds[i] = 1
			items[i] = []byte(c.Namespace + "/" + c.Name)
		}
	}
	buf, lens := packed(items)
	g, gl := cbytes(gvr.String())
	var msg *C.char
	rc := C.lw_feed_apply(f.lw.inst, g, gl, C.uint64_t(rv), (*C.uint8_t)(unsafe.Pointer(&kinds[0])),
		(*C.uint8_t)(unsafe.Pointer(&buf[0])), &lens[0], C.size_t(len(changes)), &msg)
	return f.result(gvr, rc, msg)
}

// Progress reports that nothing happened on any resource up to rv: consistent reads
// waiting for it complete and bookmarks report it.
func (f Feed) Progress(rv uint64) {
	if !f.lw.live() {
		return
	}
	defer f.lw.life.RUnlock()
	C.lw_feed_progress(f.lw.inst, C.uint64_t(rv))
}

// Gap reports that the host lost changes of a resource: it is relisted through
// Config.Relist (ErrNeedsRelist without one) and its open watches end with 410.
func (f Feed) Gap(gvr GVR) error {
	if !f.lw.live() {
		return ErrClosed
	}
	defer f.lw.life.RUnlock()
	g, gl := cbytes(gvr.String())
	var msg *C.char
	rc := C.lw_feed_gap(f.lw.inst, g, gl, &msg)
	if err := f.result(gvr, rc, msg); !errors.Is(err, ErrRelisted) {
		return err
	}
	return nil // relisted, as asked
}

// Relisted replaces a resource with its full state read at rv (objects keep a
// metadata.resourceVersion they carry); its open watches end with 410.
func (f Feed) Relisted(gvr GVR, rv uint64, objects [][]byte) error {
	if !f.lw.live() {
		return ErrClosed
	}
	defer f.lw.life.RUnlock()
	return f.relisted(gvr, rv, objects)
}

// relisted is Relisted for a caller holding the instance's shared lock.
func (f Feed) relisted(gvr GVR, rv uint64, objects [][]byte) error {
	buf, lens := packed(objects)
	g, gl := cbytes(gvr.String())
	var msg *C.char
	rc := C.lw_feed_relisted(f.lw.inst, g, gl, C.uint64_t(rv), (*C.uint8_t)(unsafe.Pointer(&buf[0])),
		&lens[0], C.size_t(len(objects)), &msg)
	err := takeErr(rc, msg)
	if errors.Is(err, ErrRelisted) {
		return nil // what was asked for
	}
	return err
}

// Revision is the newest RV fed (changes or progress).
func (f Feed) Revision() uint64 {
	if !f.lw.live() {
		return 0
	}
	defer f.lw.life.RUnlock()
	return uint64(C.lw_feed_revision(f.lw.inst))
}
