//! # listwatch-ffi: a C ABI over the listwatch facade
//!
//! For hosts that are not written in Rust — a Go apiserver fork through cgo
//! (`go/listwatch`), or C. Everything goes through the `listwatch` facade; this crate adds
//! only what crossing a C boundary needs:
//!
//! - **An instance owns everything**: its tokio runtime (worker count from the config),
//!   the facade's `ListWatch` and `Feed`, and one notification pipe. No global state and
//!   no signal handlers. The staticlib's allocations go to the host's malloc through Rust's
//!   default `System` allocator, or with the `jemalloc` feature (the fork's build) to a
//!   jemalloc of its own, prefixed so that the host's malloc stays the host's: glibc's
//!   per-thread arenas under cgo's many threads were most of listwatch's share of the
//!   fork's storm growth.
//! - **No panic crosses the boundary**: every entry point runs inside `catch_unwind` and
//!   returns [`LW_ERR_PANIC`] instead.
//! - **Responses are pulled, never pushed**: [`lw_stream_poll`] never blocks. It drives the
//!   response (head, then body chunks) on the calling thread and answers [`LW_PENDING`]
//!   when nothing is ready; when the stream can make progress its id is queued on the
//!   instance and one byte is written to the notification pipe ([`lw_notify_fd`]), which
//!   the host waits on with its own poller (Go's netpoller), then collects ready ids with
//!   [`lw_ready`]. So a watch costs no thread while idle, and its body is encoded only
//!   when the host asks for the next chunk: a stalled client holds one chunk.
//!
//! docs/embedding-go.md has the why and the measurements.

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::collections::HashMap;
use std::ffi::{CString, c_char};
use std::future::Future;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use http_body_util::Empty;
use listwatch::{
    Builder, Feed, HostChange, ListWatch, Maintenance, Outcome, Relisted, ResourceInfo,
    ResponseBody, User,
};

mod config;
pub use config::Config;

/// Success (feed calls, close, drain).
pub const LW_OK: i32 = 0;
/// [`lw_handle`]: not a request listwatch serves; the host answers it.
pub const LW_NOT_HANDLED: i32 = 1;
/// [`lw_stream_poll`]: nothing ready; wait for the stream's id from [`lw_ready`].
pub const LW_PENDING: i32 = 2;
/// [`lw_stream_poll`]: the response head: `status`, and `data`/`len` hold the headers as
/// `Name: value\r\n` lines.
pub const LW_HEAD: i32 = 3;
/// [`lw_stream_poll`]: a body chunk in `data`/`len`, valid until the next call on the stream.
pub const LW_DATA: i32 = 4;
/// [`lw_stream_poll`]: the body is complete.
pub const LW_END: i32 = 5;
/// Feed: the change did not follow what was fed before (an RV going backwards, a delete
/// of an unknown object, a gap), and the resource was replaced by the objects the host
/// passed to [`lw_feed_relisted`]; its open watches ended with 410.
pub const LW_RELISTED: i32 = 6;
/// Feed: the resource's stream is inconsistent and must be relisted: call
/// [`lw_feed_relisted`] with its full state. Until then it keeps its last consistent state.
pub const LW_NEEDS_RELIST: i32 = 7;
/// A null or invalid (non-UTF-8) argument.
pub const LW_ERR_ARG: i32 = -1;
/// The change was rejected (unknown resource, bad object); see the error message.
pub const LW_ERR_FEED: i32 = -2;
/// The configuration could not be read or the source not started; see the error message.
pub const LW_ERR_CONFIG: i32 = -3;
/// A panic inside listwatch was caught at the boundary (a bug; the stream is finished).
pub const LW_ERR_PANIC: i32 = -4;
/// The host-fed calls on an instance that follows etcd.
pub const LW_ERR_NOT_HOST_FED: i32 = -5;
/// The response body broke off mid-way: abort the response (do not end it as whole).
pub const LW_ERR_CUT: i32 = -6;

/// [`lw_handle`] flag: also answer discovery, `/version`, health and `/metrics` (for a
/// host without discovery of its own).
pub const LW_HANDLE_DISCOVERY: u32 = 1;

/// A running listwatch instance (opaque to C).
pub struct LwInstance {
    inner: Arc<Inner>,
}

/// A response being streamed (opaque to C).
pub struct LwStream {
    state: StreamState,
    waker: Waker,
    /// What the last [`LW_HEAD`] or [`LW_DATA`] pointed at; kept until the next poll.
    held: Bytes,
    /// Dropped last: the runtime outlives the response's timers and tasks.
    inner: Arc<Inner>,
}

/// Where a response is: waiting for its head (an RV wait, a consistent read), streaming
/// its body, or done.
enum StreamState {
    Head(Pin<Box<dyn Future<Output = Option<http::Response<ResponseBody>>> + Send>>),
    Ready(http::Response<ResponseBody>),
    Body(ResponseBody),
    Done,
}

/// Everything one instance owns. The runtime is declared last so that it is dropped after
/// the facade's handles that may hold its timers.
struct Inner {
    lw: ListWatch,
    feed: Option<Feed>,
    /// The full states the host passed to [`lw_feed_relisted`], taken by the relist callback.
    relisted: RelistSlots,
    notify: Arc<Notifier>,
    next_id: AtomicU64,
    maintenance: Mutex<Option<Maintenance>>,
    closed: AtomicBool,
    runtime: tokio::runtime::Runtime,
}

/// Full states passed by the host, by (group, version, resource), until the relist
/// callback takes them.
type RelistSlots = Arc<Mutex<HashMap<(String, String, String), Relisted>>>;

/// Ready stream ids and the pipe that tells the host there are some.
struct Notifier {
    state: Mutex<NotifyState>,
    writer: std::io::PipeWriter,
    reader: std::io::PipeReader,
}

struct NotifyState {
    ready: Vec<u64>,
    /// A byte is in the pipe that the host has not answered with [`lw_ready`] yet: further
    /// wake-ups only queue their id, so the pipe never fills.
    signaled: bool,
}

impl Notifier {
    fn new() -> std::io::Result<Notifier> {
        let (reader, writer) = std::io::pipe()?;
        Ok(Notifier {
            state: Mutex::new(NotifyState {
                ready: Vec::new(),
                signaled: false,
            }),
            writer,
            reader,
        })
    }

    fn wake(&self, id: u64) {
        let signal = {
            let mut s = lock(&self.state);
            s.ready.push(id);
            !std::mem::replace(&mut s.signaled, true)
        };
        if signal {
            // At most one unread byte is ever in the pipe (see `signaled`): never blocks.
            let _ = (&self.writer).write_all(&[1]);
        }
    }

    /// Moves up to `out.len()` ready ids into `out`; re-arms the pipe when all are taken.
    fn take(&self, out: &mut [u64]) -> usize {
        let mut s = lock(&self.state);
        let n = s.ready.len().min(out.len());
        for (slot, id) in out.iter_mut().zip(s.ready.drain(..n)) {
            *slot = id;
        }
        if s.ready.is_empty() {
            s.signaled = false;
        }
        n
    }
}

/// A poisoned lock only means another call panicked (and was caught): the data it guards
/// is still consistent for our uses (queues and maps updated in single steps).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes a stream by queueing its id. Holds only the notifier, so a waker kept in a timer
/// of the runtime never keeps the runtime itself alive.
struct StreamWaker {
    id: u64,
    notify: Arc<Notifier>,
}

impl Wake for StreamWaker {
    fn wake(self: Arc<Self>) {
        self.notify.wake(self.id);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.notify.wake(self.id);
    }
}

/// One frame of a response, filled by [`lw_stream_poll`].
#[repr(C)]
pub struct LwFrame {
    /// HTTP status ([`LW_HEAD`]).
    pub status: u16,
    /// Header lines ([`LW_HEAD`]) or body bytes ([`LW_DATA`]); owned by the stream.
    pub data: *const u8,
    /// Length of `data`.
    pub len: usize,
}

/// Runs `f`, turning a panic into [`LW_ERR_PANIC`] (no unwinding into C or Go).
fn guard(f: impl FnOnce() -> i32) -> i32 {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(LW_ERR_PANIC)
}

/// Writes `msg` to `*err` (a NUL-terminated string the caller frees with
/// [`lw_string_free`]) when `err` is not null.
fn set_err(err: *mut *mut c_char, msg: impl std::fmt::Display) {
    if err.is_null() {
        return;
    }
    let text = msg.to_string().replace('\0', " ");
    let c = CString::new(text).unwrap_or_default();
    // SAFETY: `err` is non-null and, per the header, points to a writable `char *`.
    unsafe { *err = c.into_raw() };
}

/// The bytes at `(ptr, len)`; empty for a null pointer.
///
/// # Safety
/// `ptr` must be null or valid for reads of `len` bytes for `'a`.
unsafe fn bytes_arg<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `ptr` is valid for `len` bytes for 'a.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// The UTF-8 text at `(ptr, len)`.
///
/// # Safety
/// As [`bytes_arg`].
unsafe fn str_arg<'a>(ptr: *const u8, len: usize) -> Result<&'a str, std::str::Utf8Error> {
    // SAFETY: forwarded from the caller.
    std::str::from_utf8(unsafe { bytes_arg(ptr, len) })
}

/// The instance behind a handle.
///
/// # Safety
/// `inst` must be null or a pointer returned by [`lw_new`] and not yet freed.
unsafe fn instance<'a>(inst: *const LwInstance) -> Option<&'a Inner> {
    // SAFETY: the caller guarantees the pointer is live; `as_ref` handles null.
    unsafe { inst.as_ref() }.map(|i| &*i.inner)
}

/// Creates an instance from a JSON configuration (see `include/listwatch.h` and
/// docs/embedding-go.md). On success `*out` is the instance; on failure returns
/// [`LW_ERR_CONFIG`] with a message in `*err`.
///
/// # Safety
/// `config` must be valid for `config_len` bytes; `out` must be writable; `err` null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_new(
    config: *const u8,
    config_len: usize,
    out: *mut *mut LwInstance,
    err: *mut *mut c_char,
) -> i32 {
    guard(|| {
        if out.is_null() {
            return LW_ERR_ARG;
        }
        // SAFETY: the caller guarantees `config` is valid for `config_len` bytes.
        let text = unsafe { bytes_arg(config, config_len) };
        match Inner::start(text) {
            Ok(inner) => {
                let boxed = Box::new(LwInstance {
                    inner: Arc::new(inner),
                });
                // SAFETY: `out` is non-null and writable per the contract.
                unsafe { *out = Box::into_raw(boxed) };
                LW_OK
            }
            Err(e) => {
                set_err(err, e);
                LW_ERR_CONFIG
            }
        }
    })
}

impl Inner {
    fn start(text: &[u8]) -> Result<Inner, String> {
        let config: Config =
            serde_json::from_slice(text).map_err(|e| format!("configuration: {e}"))?;
        // jemalloc hands freed pages back only from a thread of its own (or on the next
        // allocation in the same arena): one, as the standalone server starts.
        #[cfg(feature = "jemalloc")]
        tikv_jemalloc_ctl::max_background_threads::write(1)
            .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true))
            .map_err(|e| format!("jemalloc's background thread: {e}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.workers.max(1))
            .thread_name("listwatch")
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let notify = Arc::new(Notifier::new().map_err(|e| format!("pipe: {e}"))?);
        let relisted = RelistSlots::default();
        let mut builder = Builder::new()
            .start_rv(config.start_rv.max(1))
            .server_config(config.server.server_config());
        if let Some(resources) = config.resources.clone() {
            builder = builder.resources(resources);
        }
        // Built inside the runtime: the facade starts its views' and maintenance tasks there.
        let _entered = runtime.enter();
        let (lw, feed) = match &config.source {
            config::SourceConfig::HostFed {} => {
                let slots = relisted.clone();
                let (lw, feed) = builder.host_fed(move |info: &ResourceInfo| {
                    lock(&slots)
                        .remove(&(
                            info.group.clone(),
                            info.version.clone(),
                            info.resource.clone(),
                        ))
                        .ok_or_else(|| NEEDS_RELIST.to_string())
                });
                (lw, Some(feed))
            }
            config::SourceConfig::Etcd(etcd) => {
                (runtime.block_on(config::start_etcd(builder, etcd))?, None)
            }
        };
        let maintenance = lw.spawn_maintenance();
        drop(_entered);
        Ok(Inner {
            lw,
            feed,
            relisted,
            notify,
            next_id: AtomicU64::new(1),
            maintenance: Mutex::new(Some(maintenance)),
            closed: AtomicBool::new(false),
            runtime,
        })
    }

    fn feed(&self, err: *mut *mut c_char) -> Result<&Feed, i32> {
        self.feed.as_ref().ok_or_else(|| {
            set_err(err, "this instance follows etcd; it is not fed by the host");
            LW_ERR_NOT_HOST_FED
        })
    }
}

/// The relist callback's answer when the host has not passed the state yet.
const NEEDS_RELIST: &str = "the host must pass the resource's full state (lw_feed_relisted)";

/// Maps a feed result to a code (and message).
fn feed_result(r: Result<(), listwatch::FeedError>, err: *mut *mut c_char) -> i32 {
    use listwatch::FeedError;
    match r {
        Ok(()) => LW_OK,
        Err(e @ FeedError::Relisted { .. }) => {
            set_err(err, e);
            LW_RELISTED
        }
        Err(e @ FeedError::RelistFailed { .. }) => {
            set_err(err, e);
            LW_NEEDS_RELIST
        }
        Err(e) => {
            set_err(err, e);
            LW_ERR_FEED
        }
    }
}

/// The file descriptor the host polls for readability: a byte arrives when some stream
/// that answered [`LW_PENDING`] can make progress; then call [`lw_ready`]. Owned by the
/// instance (dup it to hand it to a poller that closes what it owns). -1 on a null
/// instance.
///
/// # Safety
/// `inst` must be null or a live instance.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_notify_fd(inst: *const LwInstance) -> i32 {
    guard(|| {
        use std::os::fd::AsRawFd;
        // SAFETY: forwarded contract.
        match unsafe { instance(inst) } {
            Some(i) => i.notify.reader.as_raw_fd(),
            None => -1,
        }
    })
}

/// Moves up to `cap` ids of streams that can make progress into `ids`; returns how many
/// (a stream may be named more than once, or after it was freed: ignore unknown ids).
/// Read the notification pipe dry before calling: it is re-armed when all ids are taken.
///
/// # Safety
/// `inst` must be a live instance; `ids` valid for writes of `cap` ids.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_ready(inst: *const LwInstance, ids: *mut u64, cap: usize) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(i) = (unsafe { instance(inst) }) else {
            return LW_ERR_ARG;
        };
        if ids.is_null() || cap == 0 {
            return LW_ERR_ARG;
        }
        // SAFETY: the caller guarantees `ids` is valid for `cap` writes.
        let out = unsafe { std::slice::from_raw_parts_mut(ids, cap) };
        i32::try_from(i.notify.take(out)).unwrap_or(i32::MAX)
    })
}

/// Offers a request to listwatch. Returns [`LW_NOT_HANDLED`] when listwatch does not
/// serve it (the host answers), or [`LW_OK`] with a stream in `*out` and its id in
/// `*id` (the id [`lw_ready`] reports); then call [`lw_stream_poll`] until [`LW_END`].
///
/// `uri` is the request's path and query; `headers` its header lines (`Name: value`,
/// separated by `\n` or `\r\n`); `user` the already-authenticated user's name (empty:
/// anonymous) and `groups` their groups separated by `\n`. With [`LW_HANDLE_DISCOVERY`]
/// in `flags` discovery and health are answered too.
///
/// # Safety
/// Every pointer must be valid for its length (or null with length 0); `out` and `id`
/// writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_handle(
    inst: *const LwInstance,
    method: *const u8,
    method_len: usize,
    uri: *const u8,
    uri_len: usize,
    headers: *const u8,
    headers_len: usize,
    user: *const u8,
    user_len: usize,
    groups: *const u8,
    groups_len: usize,
    flags: u32,
    out: *mut *mut LwStream,
    id: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(inner) = (unsafe { instance(inst) }) else {
            return LW_ERR_ARG;
        };
        if out.is_null() || id.is_null() {
            return LW_ERR_ARG;
        }
        // SAFETY: the caller guarantees each of the five pointers is valid for its length.
        let parts = unsafe {
            (
                bytes_arg(method, method_len),
                bytes_arg(uri, uri_len),
                bytes_arg(headers, headers_len),
                str_arg(user, user_len),
                str_arg(groups, groups_len),
            )
        };
        let (method, uri, headers, Ok(user), Ok(groups)) = parts else {
            return LW_ERR_ARG;
        };
        let Some(req) = build_request(method, uri, headers, user, groups) else {
            return LW_ERR_ARG;
        };
        // SAFETY: `inst` is live (checked above); the stream keeps its own reference.
        let arc = unsafe { &(*inst).inner }.clone();
        let lw = inner.lw.clone();
        let discovery = flags & LW_HANDLE_DISCOVERY != 0;
        let fut = Box::pin(async move {
            match lw.handle(req).await {
                Outcome::Handled(resp) => Some(resp),
                Outcome::NotHandled(req) if discovery => match lw.handle_discovery(req).await {
                    Outcome::Handled(resp) => Some(resp),
                    Outcome::NotHandled(_) => None,
                },
                Outcome::NotHandled(_) => None,
            }
        });
        let stream_id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let waker = Waker::from(Arc::new(StreamWaker {
            id: stream_id,
            notify: inner.notify.clone(),
        }));
        let mut stream = LwStream {
            state: StreamState::Head(fut),
            waker,
            held: Bytes::new(),
            inner: arc,
        };
        // The first poll decides whether listwatch serves the request (routing is
        // synchronous): a request it does not serve never becomes a stream.
        match stream.poll_head() {
            Poll::Ready(None) => return LW_NOT_HANDLED,
            Poll::Ready(Some(resp)) => stream.state = StreamState::Ready(resp),
            Poll::Pending => {}
        }
        // SAFETY: `out` and `id` are non-null and writable per the contract.
        unsafe {
            *out = Box::into_raw(Box::new(stream));
            *id = stream_id;
        }
        LW_OK
    })
}

/// Builds the `http::Request` the facade routes; `None` on a malformed method or URI.
fn build_request(
    method: &[u8],
    uri: &[u8],
    headers: &[u8],
    user: &str,
    groups: &str,
) -> Option<http::Request<Empty<Bytes>>> {
    let mut b = http::Request::builder()
        .method(http::Method::from_bytes(method).ok()?)
        .uri(http::Uri::try_from(uri).ok()?);
    for line in headers.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let name = http::HeaderName::from_bytes(&line[..colon]).ok()?;
        let value = line[colon + 1..].trim_ascii();
        b = b.header(name, http::HeaderValue::from_bytes(value).ok()?);
    }
    let mut req = b.body(Empty::new()).ok()?;
    if !user.is_empty() {
        req.extensions_mut()
            .insert(User::in_groups(user, groups, '\n'));
    }
    Some(req)
}

impl LwStream {
    fn poll_head(&mut self) -> Poll<Option<http::Response<ResponseBody>>> {
        let StreamState::Head(fut) = &mut self.state else {
            return Poll::Ready(None);
        };
        // Timers and tasks the response uses belong to the instance's runtime.
        let _rt = self.inner.runtime.enter();
        fut.as_mut().poll(&mut Context::from_waker(&self.waker))
    }

    fn poll(&mut self, frame: &mut LwFrame) -> i32 {
        // The host is done with the last frame: let its chunk go now, not at the next one.
        // A watch would otherwise keep its last chunk (a watch-list's initial events,
        // allocated for a full chunk) for as long as it stays idle.
        self.held = Bytes::new();
        loop {
            match std::mem::replace(&mut self.state, StreamState::Done) {
                StreamState::Head(fut) => {
                    self.state = StreamState::Head(fut);
                    match self.poll_head() {
                        Poll::Pending => return LW_PENDING,
                        Poll::Ready(Some(resp)) => self.state = StreamState::Ready(resp),
                        // Routing happened in lw_handle; a later "not handled" cannot occur.
                        Poll::Ready(None) => return LW_END,
                    }
                }
                StreamState::Ready(resp) => {
                    let (parts, body) = resp.into_parts();
                    let mut lines = Vec::with_capacity(256);
                    for (name, value) in &parts.headers {
                        lines.extend_from_slice(name.as_str().as_bytes());
                        lines.extend_from_slice(b": ");
                        lines.extend_from_slice(value.as_bytes());
                        lines.extend_from_slice(b"\r\n");
                    }
                    self.held = Bytes::from(lines);
                    self.state = StreamState::Body(body);
                    frame.status = parts.status.as_u16();
                    frame.data = self.held.as_ptr();
                    frame.len = self.held.len();
                    return LW_HEAD;
                }
                StreamState::Body(mut body) => {
                    let polled = {
                        let _rt = self.inner.runtime.enter();
                        Pin::new(&mut body).poll_frame(&mut Context::from_waker(&self.waker))
                    };
                    match polled {
                        Poll::Pending => {
                            self.state = StreamState::Body(body);
                            return LW_PENDING;
                        }
                        Poll::Ready(Some(Ok(f))) => {
                            self.state = StreamState::Body(body);
                            if let Ok(data) = f.into_data()
                                && !data.is_empty()
                            {
                                self.held = data;
                                frame.data = self.held.as_ptr();
                                frame.len = self.held.len();
                                return LW_DATA;
                            }
                            // Trailers or an empty chunk: poll on.
                        }
                        Poll::Ready(None) => {
                            drop(body);
                            return LW_END;
                        }
                        Poll::Ready(Some(Err(_cut))) => return LW_ERR_CUT,
                    }
                }
                StreamState::Done => return LW_END,
            }
        }
    }
}

/// Drives a stream one step without blocking: [`LW_HEAD`] once (status and header lines
/// in `frame`), then [`LW_DATA`] per body chunk, and [`LW_END`]; [`LW_PENDING`] when
/// nothing is ready — the stream's id then comes out of [`lw_ready`] when it can go on.
/// What `frame` points to stays valid until the next call on this stream. Poll a stream
/// from one thread at a time.
///
/// # Safety
/// `stream` must be a live stream from [`lw_handle`]; `frame` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_stream_poll(stream: *mut LwStream, frame: *mut LwFrame) -> i32 {
    // SAFETY: the caller guarantees a live stream polled by one thread, and a writable frame.
    let (Some(stream), Some(frame)) = (unsafe { stream.as_mut() }, unsafe { frame.as_mut() })
    else {
        return LW_ERR_ARG;
    };
    let r = catch_unwind(AssertUnwindSafe(|| stream.poll(frame)));
    r.unwrap_or_else(|_| {
        // The panic left the stream's state unknown: finish it.
        stream.state = StreamState::Done;
        LW_ERR_PANIC
    })
}

/// Frees a stream (finished or not: a client that went away).
///
/// # Safety
/// `stream` must be null or a live stream; it is invalid afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_stream_free(stream: *mut LwStream) {
    if stream.is_null() {
        return;
    }
    // SAFETY: a live stream from lw_handle, handed back exactly once.
    let mut stream = unsafe { Box::from_raw(stream) };
    let _ = catch_unwind(AssertUnwindSafe(move || {
        // The response's timers deregister from the runtime they were made in.
        let inner = stream.inner.clone();
        let _rt = inner.runtime.enter();
        stream.state = StreamState::Done;
        drop(stream);
    }));
}

/// Feeds one created or updated object of `group/version/resource`, committed at `rv`.
///
/// # Safety
/// Every pointer must be valid for its length; `err` null or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_put(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    rv: u64,
    json: *const u8,
    json_len: usize,
    err: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract.
    let json = unsafe { bytes_arg(json, json_len) };
    // SAFETY: forwarded contract.
    unsafe { feed_changes(inst, gvr, gvr_len, rv, &[HostChange::Put(json)], err) }
}

/// Feeds the deletion of `namespace/name` (namespace empty when cluster-scoped) at `rv`.
///
/// # Safety
/// Every pointer must be valid for its length; `err` null or writable.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_delete(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    rv: u64,
    namespace: *const u8,
    namespace_len: usize,
    name: *const u8,
    name_len: usize,
    err: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract.
    let (Ok(namespace), Ok(name)) =
        (unsafe { (str_arg(namespace, namespace_len), str_arg(name, name_len)) })
    else {
        return LW_ERR_ARG;
    };
    let change = HostChange::Delete { namespace, name };
    // SAFETY: forwarded contract.
    unsafe { feed_changes(inst, gvr, gvr_len, rv, &[change], err) }
}

/// Feeds `n` changes committed together at `rv` (one transaction). Change `i` is
/// `items[off_i .. off_i + lens[i]]` (offsets add up): the object's JSON when `kinds[i]`
/// is 0 (put), `namespace/name` when it is 1 (delete; `/name` when cluster-scoped).
///
/// # Safety
/// `kinds` and `lens` valid for `n` elements, `items` for the sum of `lens`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_apply(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    rv: u64,
    kinds: *const u8,
    items: *const u8,
    lens: *const usize,
    n: usize,
    err: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract (lengths checked inside).
    let Some(parts) = (unsafe { split_items(items, lens, n) }) else {
        return LW_ERR_ARG;
    };
    // SAFETY: the caller guarantees `kinds` is valid for `n` bytes.
    let kinds = unsafe { bytes_arg(kinds, n) };
    let mut changes = Vec::with_capacity(n);
    for (kind, item) in kinds.iter().zip(parts) {
        changes.push(match kind {
            0 => HostChange::Put(item),
            1 => {
                let Some((namespace, name)) = std::str::from_utf8(item)
                    .ok()
                    .and_then(|s| s.split_once('/'))
                else {
                    set_err(err, "a delete is namespace/name");
                    return LW_ERR_ARG;
                };
                HostChange::Delete { namespace, name }
            }
            _ => return LW_ERR_ARG,
        });
    }
    // SAFETY: forwarded contract.
    unsafe { feed_changes(inst, gvr, gvr_len, rv, &changes, err) }
}

/// `n` byte strings laid end to end in `items`, of `lens[i]` bytes each.
///
/// # Safety
/// `lens` valid for `n` elements; `items` valid for their sum.
unsafe fn split_items<'a>(items: *const u8, lens: *const usize, n: usize) -> Option<Vec<&'a [u8]>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if lens.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `lens` is valid for `n` elements.
    let lens = unsafe { std::slice::from_raw_parts(lens, n) };
    let total = lens.iter().try_fold(0usize, |a, l| a.checked_add(*l))?;
    // SAFETY: the caller guarantees `items` is valid for the sum of `lens`.
    let mut rest = unsafe { bytes_arg(items, total) };
    let mut out = Vec::with_capacity(n);
    for l in lens {
        let (item, tail) = rest.split_at_checked(*l)?;
        out.push(item);
        rest = tail;
    }
    Some(out)
}

/// Splits `group/version/resource` (`/v1/pods` for the core group).
fn split_gvr(gvr: &str) -> Option<(&str, &str, &str)> {
    let mut it = gvr.splitn(3, '/');
    Some((it.next()?, it.next()?, it.next()?))
}

/// # Safety
/// `inst` null or live; `gvr` valid for `gvr_len`; `err` null or writable.
unsafe fn feed_changes(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    rv: u64,
    changes: &[HostChange<'_>],
    err: *mut *mut c_char,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let (Some(inner), Ok(gvr)) = (unsafe { (instance(inst), str_arg(gvr, gvr_len)) }) else {
            return LW_ERR_ARG;
        };
        let Some((g, v, r)) = split_gvr(gvr) else {
            set_err(err, "resource is group/version/resource");
            return LW_ERR_ARG;
        };
        let feed = match inner.feed(err) {
            Ok(f) => f,
            Err(code) => return code,
        };
        feed_result(feed.apply(g, v, r, rv, changes), err)
    })
}

/// Nothing happened on any resource up to `rv`: consistent reads complete and bookmarks
/// report it.
///
/// # Safety
/// `inst` null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_progress(inst: *const LwInstance, rv: u64) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(inner) = (unsafe { instance(inst) }) else {
            return LW_ERR_ARG;
        };
        match inner.feed(std::ptr::null_mut()) {
            Ok(feed) => {
                feed.progress(rv);
                LW_OK
            }
            Err(code) => code,
        }
    })
}

/// The host lost changes of `group/version/resource`: answers [`LW_NEEDS_RELIST`] — the
/// host then passes the full state to [`lw_feed_relisted`].
///
/// # Safety
/// `inst` null or live; `gvr` valid for `gvr_len`; `err` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_gap(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    err: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { relist(inst, gvr, gvr_len, None, err) }
}

/// Replaces `group/version/resource` with its full state read at `rv` (`n` objects' JSON,
/// laid end to end in `objects` with `lens[i]` bytes each; objects keep a
/// `metadata.resourceVersion` they carry). Open watches on it end with 410. Returns
/// [`LW_RELISTED`] on success.
///
/// # Safety
/// As [`lw_feed_apply`].
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_relisted(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    rv: u64,
    objects: *const u8,
    lens: *const usize,
    n: usize,
    err: *mut *mut c_char,
) -> i32 {
    // SAFETY: forwarded contract.
    let Some(parts) = (unsafe { split_items(objects, lens, n) }) else {
        return LW_ERR_ARG;
    };
    let state = Relisted {
        rv,
        objects: parts.into_iter().map(<[u8]>::to_vec).collect(),
    };
    // SAFETY: forwarded contract.
    unsafe { relist(inst, gvr, gvr_len, Some(state), err) }
}

/// # Safety
/// `inst` null or live; `gvr` valid for `gvr_len`; `err` null or writable.
unsafe fn relist(
    inst: *const LwInstance,
    gvr: *const u8,
    gvr_len: usize,
    state: Option<Relisted>,
    err: *mut *mut c_char,
) -> i32 {
    guard(move || {
        // SAFETY: forwarded contract.
        let (Some(inner), Ok(gvr)) = (unsafe { (instance(inst), str_arg(gvr, gvr_len)) }) else {
            return LW_ERR_ARG;
        };
        let Some((g, v, r)) = split_gvr(gvr) else {
            return LW_ERR_ARG;
        };
        let feed = match inner.feed(err) {
            Ok(f) => f,
            Err(code) => return code,
        };
        let key = (g.to_string(), v.to_string(), r.to_string());
        if let Some(state) = state {
            lock(&inner.relisted).insert(key.clone(), state);
        }
        let code = feed_result(feed.gap(g, v, r), err);
        // A state the callback did not take (an unknown resource) is not kept for later.
        lock(&inner.relisted).remove(&key);
        code
    })
}

/// The newest RV fed (changes or progress); 0 for an instance that follows etcd.
///
/// # Safety
/// `inst` null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_feed_revision(inst: *const LwInstance) -> u64 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        unsafe { instance(inst) }
            .and_then(|i| i.feed.as_ref())
            .map_or(0, Feed::revision)
    }))
    .unwrap_or(0)
}

/// Ends every open watch at a random moment within `grace_ms` (they end with a clean
/// end of stream; clients re-watch). Returns at once.
///
/// # Safety
/// `inst` null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_drain(inst: *const LwInstance, grace_ms: u64) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(inner) = (unsafe { instance(inst) }) else {
            return LW_ERR_ARG;
        };
        let _rt = inner.runtime.enter();
        inner.lw.drain(Duration::from_millis(grace_ms));
        LW_OK
    })
}

/// Drains open watches over `grace_ms`, stops the housekeeping and the source's
/// background work (etcd followers) and waits for them. Blocks the calling thread until
/// then; call once, before [`lw_free`]. Streams still open finish on their next polls.
///
/// # Safety
/// `inst` null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_close(inst: *const LwInstance, grace_ms: u64) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(inner) = (unsafe { instance(inst) }) else {
            return LW_ERR_ARG;
        };
        if inner.closed.swap(true, Ordering::AcqRel) {
            return LW_OK;
        }
        let maintenance = lock(&inner.maintenance).take();
        let lw = inner.lw.clone();
        inner.runtime.block_on(async move {
            if let Some(m) = maintenance {
                m.shutdown().await;
            }
            lw.close(Duration::from_millis(grace_ms)).await;
        });
        LW_OK
    })
}

/// Frees the instance. Its runtime stops once the last stream is freed too.
///
/// # Safety
/// `inst` null or live; invalid afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_free(inst: *mut LwInstance) {
    if inst.is_null() {
        return;
    }
    // SAFETY: a live instance from lw_new, handed back exactly once.
    let inst = unsafe { Box::from_raw(inst) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(inst)));
}

/// The built-in resources listwatch serves, one `resource[.group]` a line as
/// kube-apiserver's `--watch-cache-sizes` names them (each once, however many versions it
/// has), in `*out`: a NUL-terminated string the caller frees with [`lw_string_free`]. A host
/// that lets listwatch serve them turns its own caches off for exactly these, from the one
/// list listwatch keeps. Returns [`LW_OK`], or [`LW_ERR_ARG`] for a null `out`.
///
/// # Safety
/// `out` null or valid for one write of a `char *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_builtin_resources(out: *mut *mut c_char) -> i32 {
    guard(|| {
        if out.is_null() {
            return LW_ERR_ARG;
        }
        // Resource and group names never hold a NUL.
        let names = CString::new(builtin_resource_names().join("\n")).unwrap_or_default();
        // SAFETY: `out` is non-null and, per the contract above, writable.
        unsafe { *out = names.into_raw() };
        LW_OK
    })
}

/// `resource[.group]` of each built-in resource, first version's order, without repeats.
fn builtin_resource_names() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in listwatch::builtin_resources() {
        let name = if r.group.is_empty() {
            r.resource
        } else {
            format!("{}.{}", r.resource, r.group)
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Frees a message returned through an `err` argument.
///
/// # Safety
/// `s` null or a string from this library, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lw_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in `set_err`.
        drop(unsafe { CString::from_raw(s) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls the C ABI as a host would, on Rust strings.
    fn handle(inst: *const LwInstance, uri: &str, headers: &str) -> *mut LwStream {
        let (mut stream, mut id) = (std::ptr::null_mut(), 0);
        let (user, groups) = ("admin", "system:masters");
        // SAFETY: every pointer is valid for its length; out and id are writable.
        let rc = unsafe {
            lw_handle(
                inst,
                b"GET".as_ptr(),
                3,
                uri.as_ptr(),
                uri.len(),
                headers.as_ptr(),
                headers.len(),
                user.as_ptr(),
                user.len(),
                groups.as_ptr(),
                groups.len(),
                0,
                &mut stream,
                &mut id,
            )
        };
        assert_eq!(rc, LW_OK);
        stream
    }

    #[test]
    fn an_idle_watch_lets_its_last_chunk_go() {
        let config = br#"{"startRv": 1, "source": {"hostFed": {}}}"#;
        let (mut inst, mut err) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid config bytes; out and err writable.
        let rc = unsafe { lw_new(config.as_ptr(), config.len(), &mut inst, &mut err) };
        assert_eq!(rc, LW_OK);
        let pod = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"default","uid":"u1"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        // SAFETY: a live instance; valid bytes.
        let rc = unsafe {
            lw_feed_put(
                inst,
                b"/v1/pods".as_ptr(),
                8,
                2,
                pod.as_ptr(),
                pod.len(),
                &mut err,
            )
        };
        assert_eq!(rc, LW_OK);
        let stream = handle(
            inst,
            "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            "Accept: application/json\r\n",
        );
        let mut frame = LwFrame {
            status: 0,
            data: std::ptr::null(),
            len: 0,
        };
        let mut data = Vec::new();
        // The initial event and the bookmark that ends them, then the watch waits.
        for _ in 0..500 {
            // SAFETY: a live stream, polled from this thread only.
            match unsafe { lw_stream_poll(stream, &mut frame) } {
                LW_HEAD => {}
                LW_DATA => {
                    // SAFETY: valid until the next poll.
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(frame.data, frame.len)
                    })
                }
                LW_PENDING
                    if data.ends_with(b"\n")
                        && String::from_utf8_lossy(&data).contains("initial-events-end") =>
                {
                    break;
                }
                LW_PENDING => std::thread::sleep(Duration::from_millis(10)),
                other => panic!("poll: {other}"),
            }
        }
        let text = String::from_utf8_lossy(&data);
        assert!(text.contains(r#""name":"a""#), "{text}");
        // SAFETY: the stream is live; nothing else polls it.
        let held = unsafe { &(*stream).held };
        assert!(
            held.is_empty(),
            "an idle watch still holds {} bytes",
            held.len()
        );
        // SAFETY: handed back once each.
        unsafe {
            lw_stream_free(stream);
            lw_free(inst);
        }
    }
}
