/* listwatch: the Kubernetes read path (LIST/GET/WATCH/watch-list) embedded in a host. See docs/embedding-go.md. */

#ifndef LISTWATCH_H
#define LISTWATCH_H

/* Generated from crates/ffi/src by cbindgen (tests/header.rs keeps it in sync); do not edit. */

#include <stdint.h>
#include <stddef.h>

// Success (feed calls, close, drain).
#define LW_OK 0

// [`lw_handle`]: not a request listwatch serves; the host answers it.
#define LW_NOT_HANDLED 1

// [`lw_stream_poll`]: nothing ready; wait for the stream's id from [`lw_ready`].
#define LW_PENDING 2

// [`lw_stream_poll`]: the response head: `status`, and `data`/`len` hold the headers as
// `Name: value\r\n` lines.
#define LW_HEAD 3

// [`lw_stream_poll`]: a body chunk in `data`/`len`, valid until the next call on the stream.
#define LW_DATA 4

// [`lw_stream_poll`]: the body is complete.
#define LW_END 5

// Feed: the change did not follow what was fed before (an RV going backwards, a delete
// of an unknown object, a gap), and the resource was replaced by the objects the host
// passed to [`lw_feed_relisted`]; its open watches ended with 410.
#define LW_RELISTED 6

// Feed: the resource's stream is inconsistent and must be relisted: call
// [`lw_feed_relisted`] with its full state. Until then it keeps its last consistent state.
#define LW_NEEDS_RELIST 7

// A null or invalid (non-UTF-8) argument.
#define LW_ERR_ARG -1

// The change was rejected (unknown resource, bad object); see the error message.
#define LW_ERR_FEED -2

// The configuration could not be read or the source not started; see the error message.
#define LW_ERR_CONFIG -3

// A panic inside listwatch was caught at the boundary (a bug; the stream is finished).
#define LW_ERR_PANIC -4

// The host-fed calls on an instance that follows etcd.
#define LW_ERR_NOT_HOST_FED -5

// The response body broke off mid-way: abort the response (do not end it as whole).
#define LW_ERR_CUT -6

// [`lw_handle`] flag: also answer discovery, `/version`, health and `/metrics` (for a
// host without discovery of its own).
#define LW_HANDLE_DISCOVERY 1

// A running listwatch instance (opaque to C).
typedef struct LwInstance LwInstance;

// A response being streamed (opaque to C).
typedef struct LwStream LwStream;

// One frame of a response, filled by [`lw_stream_poll`].
typedef struct {
  // HTTP status ([`LW_HEAD`]).
  uint16_t status;
  // Header lines ([`LW_HEAD`]) or body bytes ([`LW_DATA`]); owned by the stream.
  const uint8_t *data;
  // Length of `data`.
  size_t len;
} LwFrame;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Creates an instance from a JSON configuration (see `include/listwatch.h` and
// docs/embedding-go.md). On success `*out` is the instance; on failure returns
// [`LW_ERR_CONFIG`] with a message in `*err`.
//
// # Safety
// `config` must be valid for `config_len` bytes; `out` must be writable; `err` null or
// writable.
int32_t lw_new(const uint8_t *config, size_t config_len, LwInstance **out, char **err);

// The file descriptor the host polls for readability: a byte arrives when some stream
// that answered [`LW_PENDING`] can make progress; then call [`lw_ready`]. Owned by the
// instance (dup it to hand it to a poller that closes what it owns). -1 on a null
// instance.
//
// # Safety
// `inst` must be null or a live instance.
int32_t lw_notify_fd(const LwInstance *inst);

// Moves up to `cap` ids of streams that can make progress into `ids`; returns how many
// (a stream may be named more than once, or after it was freed: ignore unknown ids).
// Read the notification pipe dry before calling: it is re-armed when all ids are taken.
//
// # Safety
// `inst` must be a live instance; `ids` valid for writes of `cap` ids.
int32_t lw_ready(const LwInstance *inst, uint64_t *ids, size_t cap);

// Offers a request to listwatch. Returns [`LW_NOT_HANDLED`] when listwatch does not
// serve it (the host answers), or [`LW_OK`] with a stream in `*out` and its id in
// `*id` (the id [`lw_ready`] reports); then call [`lw_stream_poll`] until [`LW_END`].
//
// `uri` is the request's path and query; `headers` its header lines (`Name: value`,
// separated by `\n` or `\r\n`); `user` the already-authenticated user's name (empty:
// anonymous) and `groups` their groups separated by `\n`. With [`LW_HANDLE_DISCOVERY`]
// in `flags` discovery and health are answered too.
//
// # Safety
// Every pointer must be valid for its length (or null with length 0); `out` and `id`
// writable.
int32_t lw_handle(const LwInstance *inst,
                  const uint8_t *method,
                  size_t method_len,
                  const uint8_t *uri,
                  size_t uri_len,
                  const uint8_t *headers,
                  size_t headers_len,
                  const uint8_t *user,
                  size_t user_len,
                  const uint8_t *groups,
                  size_t groups_len,
                  uint32_t flags,
                  LwStream **out,
                  uint64_t *id);

// Drives a stream one step without blocking: [`LW_HEAD`] once (status and header lines
// in `frame`), then [`LW_DATA`] per body chunk, and [`LW_END`]; [`LW_PENDING`] when
// nothing is ready — the stream's id then comes out of [`lw_ready`] when it can go on.
// What `frame` points to stays valid until the next call on this stream. Poll a stream
// from one thread at a time.
//
// # Safety
// `stream` must be a live stream from [`lw_handle`]; `frame` writable.
int32_t lw_stream_poll(LwStream *stream, LwFrame *frame);

// Frees a stream (finished or not: a client that went away).
//
// # Safety
// `stream` must be null or a live stream; it is invalid afterwards.
void lw_stream_free(LwStream *stream);

// Feeds one created or updated object of `group/version/resource`, committed at `rv`.
//
// # Safety
// Every pointer must be valid for its length; `err` null or writable.
int32_t lw_feed_put(const LwInstance *inst,
                    const uint8_t *gvr,
                    size_t gvr_len,
                    uint64_t rv,
                    const uint8_t *json,
                    size_t json_len,
                    char **err);

// Feeds the deletion of `namespace/name` (namespace empty when cluster-scoped) at `rv`.
//
// # Safety
// Every pointer must be valid for its length; `err` null or writable.
int32_t lw_feed_delete(const LwInstance *inst,
                       const uint8_t *gvr,
                       size_t gvr_len,
                       uint64_t rv,
                       const uint8_t *namespace_,
                       size_t namespace_len,
                       const uint8_t *name,
                       size_t name_len,
                       char **err);

// Feeds `n` changes committed together at `rv` (one transaction). Change `i` is
// `items[off_i .. off_i + lens[i]]` (offsets add up): the object's JSON when `kinds[i]`
// is 0 (put), `namespace/name` when it is 1 (delete; `/name` when cluster-scoped).
//
// # Safety
// `kinds` and `lens` valid for `n` elements, `items` for the sum of `lens`.
int32_t lw_feed_apply(const LwInstance *inst,
                      const uint8_t *gvr,
                      size_t gvr_len,
                      uint64_t rv,
                      const uint8_t *kinds,
                      const uint8_t *items,
                      const size_t *lens,
                      size_t n,
                      char **err);

// Nothing happened on any resource up to `rv`: consistent reads complete and bookmarks
// report it.
//
// # Safety
// `inst` null or live.
int32_t lw_feed_progress(const LwInstance *inst, uint64_t rv);

// The host lost changes of `group/version/resource`: answers [`LW_NEEDS_RELIST`] — the
// host then passes the full state to [`lw_feed_relisted`].
//
// # Safety
// `inst` null or live; `gvr` valid for `gvr_len`; `err` null or writable.
int32_t lw_feed_gap(const LwInstance *inst, const uint8_t *gvr, size_t gvr_len, char **err);

// Replaces `group/version/resource` with its full state read at `rv` (`n` objects' JSON,
// laid end to end in `objects` with `lens[i]` bytes each; objects keep a
// `metadata.resourceVersion` they carry). Open watches on it end with 410. Returns
// [`LW_RELISTED`] on success.
//
// # Safety
// As [`lw_feed_apply`].
int32_t lw_feed_relisted(const LwInstance *inst,
                         const uint8_t *gvr,
                         size_t gvr_len,
                         uint64_t rv,
                         const uint8_t *objects,
                         const size_t *lens,
                         size_t n,
                         char **err);

// The newest RV fed (changes or progress); 0 for an instance that follows etcd.
//
// # Safety
// `inst` null or live.
uint64_t lw_feed_revision(const LwInstance *inst);

// Ends every open watch at a random moment within `grace_ms` (they end with a clean
// end of stream; clients re-watch). Returns at once.
//
// # Safety
// `inst` null or live.
int32_t lw_drain(const LwInstance *inst, uint64_t grace_ms);

// Drains open watches over `grace_ms`, stops the housekeeping and the source's
// background work (etcd followers) and waits for them. Blocks the calling thread until
// then; call once, before [`lw_free`]. Streams still open finish on their next polls.
//
// # Safety
// `inst` null or live.
int32_t lw_close(const LwInstance *inst, uint64_t grace_ms);

// Frees the instance. Its runtime stops once the last stream is freed too.
//
// # Safety
// `inst` null or live; invalid afterwards.
void lw_free(LwInstance *inst);

// The built-in resources listwatch serves, one `resource[.group]` a line as
// kube-apiserver's `--watch-cache-sizes` names them (each once, however many versions it
// has), in `*out`: a NUL-terminated string the caller frees with [`lw_string_free`]. A host
// that lets listwatch serve them turns its own caches off for exactly these, from the one
// list listwatch keeps. Returns [`LW_OK`], or [`LW_ERR_ARG`] for a null `out`.
//
// # Safety
// `out` null or valid for one write of a `char *`.
int32_t lw_builtin_resources(char **out);

// Frees a message returned through an `err` argument.
//
// # Safety
// `s` null or a string from this library, freed once.
void lw_string_free(char *s);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* LISTWATCH_H */
