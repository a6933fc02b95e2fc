//! Request handlers: where a request's resourceVersion semantics pick the snapshot or
//! cursor it is served from, and where writes reach the source's writer. Free functions of
//! a [`Ctx`] (the source and the configuration): they know nothing of the app around them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use listwatch_codec::{ListEncoder, ObjectWriter, WatchEncoder, WatchSpec};
use listwatch_core::options::list_prefix;
use listwatch_core::{
    ApiError, ContinueToken, ListOptions, ObjectRef, ResourceVersion, RvMatch, Verb, WriteOptions,
};
use listwatch_patch::PatchType;
use listwatch_sources::writes::Scope;
use listwatch_sources::{Source, SourceWriter, WriteOp, WriteRequest, WriteResult, writes};
use listwatch_store::{Filter, Snapshot, SnapshotReader, Store, StoreError};
use tokio::time::Instant;

use crate::body::{StreamedBody, full};
use crate::limits::ListSeat;
use crate::request::{Payload, Read, RequestHead, Target};
use crate::response::{Answer, encoded, typed, with_newline};
use crate::{RequestBody, ServerConfig};

/// What handlers read: the source and the server's configuration.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    /// The source of truth behind the stores.
    pub source: &'a dyn Source,
    /// Server tunables.
    pub config: &'a ServerConfig,
    /// The app's window of protobuf items shared by concurrent responses.
    pub sharing: &'a listwatch_codec::Sharing,
}

impl<'a> Ctx<'a> {
    /// The source's writer (the source's own refusal when it takes no writes).
    fn writer(&self) -> Result<&'a dyn SourceWriter, ApiError> {
        self.source
            .writer()
            .ok_or_else(|| self.source.refuse_write())
    }
}

impl Ctx<'_> {
    /// Refuses reads of a cache its source no longer vouches for (being loaded or relisted
    /// after a lost event), as kube-apiserver does while its watch cache (re)initializes.
    fn ready(&self, store: &Store) -> Result<(), ApiError> {
        if self.source.is_ready(store) {
            Ok(())
        } else {
            Err(ApiError::TooManyRequests(
                "storage is (re)initializing".into(),
            ))
        }
    }

    /// Waits until `store` has reached `rv` (bounded by the configured wait).
    async fn wait_for(&self, store: &Store, rv: u64) -> Result<(), ApiError> {
        writes::wait_for(self.source, store, rv, self.config.rv_wait).await
    }

    /// A snapshot at least as new as the source's current revision (consistent read).
    async fn consistent_snapshot(&self, store: &Store) -> Result<Snapshot, ApiError> {
        writes::consistent_snapshot(self.source, store, self.config.rv_wait).await
    }

    /// The snapshot a LIST/GET/watch-list reads, by the RV rules of kube-apiserver.
    async fn read_snapshot(&self, store: &Store, opts: &ListOptions) -> Result<Snapshot, ApiError> {
        match (opts.resource_version, opts.rv_match) {
            (ResourceVersion::Unset, _) => self.consistent_snapshot(store).await,
            (ResourceVersion::Any, _) => Ok(store.current()),
            (ResourceVersion::At(rv), Some(RvMatch::Exact)) => {
                self.wait_for(store, rv).await?;
                Ok(store.snapshot_at(rv)?)
            }
            (ResourceVersion::At(rv), _) => {
                self.wait_for(store, rv).await?;
                Ok(store.current())
            }
        }
    }
}

/// LIST, GET, WATCH or watch-list of `target`, authorized already.
/// A watch-list's `list_seat` goes with its body, which gives it back once the initial
/// events are sent.
pub async fn read(
    ctx: Ctx<'_>,
    verb: Verb,
    target: Target,
    read: Result<Read, ApiError>,
    list_seat: Option<Box<ListSeat>>,
) -> Answer {
    ctx.ready(&target.store)?;
    let Read { options, rendering } = read?;
    let writer = rendering.writer(target.store.info(), ctx.sharing)?;
    let gzip = rendering.gzip;
    let ns = target.namespace.as_deref();
    match (verb, target.name) {
        (Verb::Watch, _) => watch(ctx, target.store, ns, options, writer, gzip, list_seat).await,
        (Verb::Get, Some(name)) => get(ctx, &target.store, ns, &name, &options, writer).await,
        _ => list(ctx, target.store, ns, options, writer, gzip).await,
    }
}

async fn get(
    ctx: Ctx<'_>,
    store: &Store,
    ns: Option<&str>,
    name: &str,
    opts: &ListOptions,
    mut writer: ObjectWriter,
) -> Answer {
    let snap = ctx.read_snapshot(store, opts).await?;
    let key = store.info().key(ns.unwrap_or(""), name);
    let Some(r) = snap.get(&key) else {
        return Err(ApiError::NotFound(ObjectRef::new(store.info(), name)));
    };
    let body = writer
        .object(r)
        .map_err(|e| ApiError::Internal(format!("encoding the object: {e}")))?;
    Ok(typed(
        StatusCode::OK,
        writer.content_type(false),
        full(body),
    ))
}

/// Any other verb on `target`, authorized already: the source's writer (405 when it has
/// none, with the source's reason).
pub async fn write(ctx: Ctx<'_>, head: &RequestHead, target: Target, payload: Payload) -> Answer {
    let writer = ctx.writer()?;
    let options = WriteOptions::from_params(&head.params, head.verb)?;
    let (store, ns) = (&target.store, target.namespace.as_deref());
    let w = match (head.verb, target.name.as_deref()) {
        (Verb::Create, None) => {
            let bytes = read_request_body(ctx.config, payload).await?;
            let op = WriteOp::Create { body: &bytes };
            writer
                .write(WriteRequest::new(store, ns, op, options))
                .await?
        }
        (Verb::Update, Some(name)) => {
            let bytes = read_request_body(ctx.config, payload).await?;
            let op = WriteOp::Update { name, body: &bytes };
            writer
                .write(WriteRequest::new(store, ns, op, options))
                .await?
        }
        (Verb::Patch | Verb::Apply, Some(name)) => {
            patch(ctx, &target, name, payload, Scope::Object, options).await?
        }
        (Verb::Delete, Some(name)) => {
            let bytes = read_request_body(ctx.config, payload).await?;
            let options = WriteOptions::for_delete(&head.params, &bytes)?;
            let op = WriteOp::Delete { name };
            writer
                .write(WriteRequest::new(store, ns, op, options))
                .await?
        }
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let code = StatusCode::from_u16(w.code)
        .map_err(|_| ApiError::Internal(format!("the source answered code {}", w.code)))?;
    Ok(typed(code, "application/json", full(with_newline(w.body))))
}

/// PATCH: the patch (`listwatch-patch`) applied to the stored object and sent through the
/// writer's update (`listwatch_sources::writes::patch`); server-side apply is a 415.
async fn patch(
    ctx: Ctx<'_>,
    target: &Target,
    name: &str,
    payload: Payload,
    scope: Scope,
    options: WriteOptions,
) -> Result<WriteResult, ApiError> {
    let info = target.store.info();
    let builtin = listwatch_patch::GoNode::kind(&info.api_version(), &info.kind).is_some();
    let patch_type = patch_type(payload.content_type.as_deref(), builtin)?;
    let patch = read_body_bytes(ctx.config, payload.body).await?;
    let wait = ctx.config.rv_wait;
    let (source, writer) = (ctx.source, ctx.writer()?);
    let ns = target.namespace.as_deref();
    writes::patch(
        source,
        writer,
        &target.store,
        ns,
        name,
        patch_type,
        &patch,
        scope,
        options,
        wait,
    )
    .await
}

/// The patch type of `content_type`; server-side apply is answered 415 (docs/resources.md).
fn patch_type(content_type: Option<&str>, builtin: bool) -> Result<PatchType, ApiError> {
    match PatchType::from_content_type(content_type.unwrap_or(""), builtin)? {
        PatchType::Apply => Err(listwatch_patch::PatchError::ApplyNotSupported { builtin }.into()),
        t => Ok(t),
    }
}

/// GET, PUT or PATCH of an object's subresource (routes serve `scale` and `status`).
pub async fn subresource(
    ctx: Ctx<'_>,
    head: &RequestHead,
    target: Target,
    payload: Payload,
) -> Answer {
    match target.subresource.as_deref() {
        Some("status") => status(ctx, head, target, payload).await,
        _ => scale(ctx, head, target, payload).await,
    }
}

/// GET, PUT or PATCH of `…/status`: the whole object; a write changes its `.status` only
/// (`writes::Scope::Status`), with the request's `resourceVersion` as the precondition.
async fn status(ctx: Ctx<'_>, head: &RequestHead, target: Target, payload: Payload) -> Answer {
    let (store, ns) = (&target.store, target.namespace.as_deref());
    let name = target.name.as_deref().ok_or(ApiError::MethodNotAllowed)?;
    ctx.ready(store)?;
    let w = match head.verb {
        Verb::Get => {
            let snap = ctx.consistent_snapshot(store).await?;
            let current = writes::stored(&snap, store.info(), ns, name)?;
            WriteResult {
                code: 200,
                body: current.bytes().clone(),
            }
        }
        Verb::Update => {
            let writer = ctx.writer()?;
            let options = WriteOptions::from_params(&head.params, head.verb)?;
            let wanted = read_request_body(ctx.config, payload).await?;
            let snap = ctx.consistent_snapshot(store).await?;
            let current = writes::stored(&snap, store.info(), ns, name)?;
            let bytes = Scope::Status.narrow(current.bytes(), wanted.to_vec())?;
            let op = WriteOp::Update { name, body: &bytes };
            writer
                .write(WriteRequest::new(store, ns, op, options))
                .await?
        }
        Verb::Patch | Verb::Apply => {
            let options = WriteOptions::from_params(&head.params, head.verb)?;
            patch(ctx, &target, name, payload, Scope::Status, options).await?
        }
        _ => return Err(ApiError::MethodNotAllowed),
    };
    Ok(typed(
        StatusCode::OK,
        "application/json",
        full(with_newline(w.body)),
    ))
}

/// GET, PUT or PATCH of `…/scale`: the object's `spec.replicas` as an autoscaling/v1
/// `Scale` (`listwatch_sources::writes`); a write changes `spec.replicas` only, through the
/// writer's update with the Scale's `resourceVersion` as its precondition.
async fn scale(ctx: Ctx<'_>, head: &RequestHead, target: Target, payload: Payload) -> Answer {
    let (store, ns) = (&target.store, target.namespace.as_deref());
    let name = target.name.as_deref().ok_or(ApiError::MethodNotAllowed)?;
    ctx.ready(store)?;
    let snap = ctx.consistent_snapshot(store).await?;
    let current = writes::current(&snap, store.info(), ns, name)?;
    let answer = match head.verb {
        Verb::Get => writes::scale_of(&current),
        Verb::Update | Verb::Patch | Verb::Apply => {
            let writer = ctx.writer()?;
            let options = WriteOptions::from_params(&head.params, head.verb)?;
            let wanted = if head.verb == Verb::Update {
                read_request_body(ctx.config, payload).await?
            } else {
                let patch_type = patch_type(payload.content_type.as_deref(), true)?;
                let patch = read_body_bytes(ctx.config, payload.body).await?;
                writes::patch_scale(&current, patch_type, &patch)?
            };
            let bytes = writes::scaled(&current, &wanted, name)?;
            let op = WriteOp::Update { name, body: &bytes };
            let w = writer
                .write(WriteRequest::new(store, ns, op, options))
                .await?;
            writes::scale_of(&writes::parse(&w.body)?)
        }
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let body = serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(typed(
        StatusCode::OK,
        "application/json",
        full(with_newline(Bytes::from(body))),
    ))
}

async fn list(
    ctx: Ctx<'_>,
    store: Arc<Store>,
    ns: Option<&str>,
    opts: ListOptions,
    writer: ObjectWriter,
    gzip_ok: bool,
) -> Answer {
    let info = store.info().clone();
    let prefix = list_prefix(&info, ns);
    let (snap, start) = match &opts.continue_token {
        Some(token) if token.rv > 0 => {
            let rv = token.rv as u64;
            ctx.wait_for(&store, rv).await?;
            let snap = store.snapshot_at(rv).map_err(|e| match e {
                StoreError::SnapshotGone { .. } => ApiError::ContinueExpired {
                    inconsistent_token: ContinueToken::encode_inconsistent(
                        &prefix,
                        &token.start_key,
                    ),
                },
                other => other.into(),
            })?;
            (snap, Some(token.start_key.clone()))
        }
        // rv -1: an inconsistent continuation from the latest state.
        Some(token) => (store.current(), Some(token.start_key.clone())),
        None => (ctx.read_snapshot(&store, &opts).await?, None),
    };
    let limit = opts.page_limit();
    if limit.is_some() {
        // Later pages name this RV in their token: keep it so they are O(1) to serve.
        store.retain(&snap);
    }
    let filter = Arc::new(Filter::new(&info, ns, &opts));
    let reader = SnapshotReader::new(snap, filter, start.as_deref(), limit);
    let content_type = writer.content_type(false);
    if let Some(form) = writer.measured_form() {
        store.note_listed_form(form);
    }
    let encoder = ListEncoder::new(
        reader,
        writer,
        prefix,
        limit.is_some(),
        ctx.config.chunk_bytes,
    );
    let (body, gzip) = StreamedBody::list(encoder, gzip_ok);
    Ok(encoded(
        typed(StatusCode::OK, content_type, BodyExt::boxed(body)),
        gzip_ok,
        gzip,
    ))
}

async fn watch(
    ctx: Ctx<'_>,
    store: Arc<Store>,
    ns: Option<&str>,
    opts: ListOptions,
    mut writer: ObjectWriter,
    gzip_ok: bool,
    list_seat: Option<Box<ListSeat>>,
) -> Answer {
    let info = store.info().clone();
    let content_type = writer.content_type(true);
    let filter = Arc::new(Filter::new(&info, ns, &opts));
    let timeout = match opts.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        // kube-apiserver takes a negative timeout as it is: the watch ends at once.
        Some(s) if s < 0 => Duration::ZERO,
        _ => {
            // kube-apiserver: a random duration in [min-request-timeout, 2×) so watches
            // do not all end (and re-list) at once.
            let base = ctx.config.min_request_timeout.as_secs_f64();
            Duration::from_secs_f64(base * (1.0 + crate::body::random_fraction()))
        }
    };
    let deadline = Instant::now() + timeout;
    let (cursor, initial_reader, initial_rv) = if opts.wants_initial_events() {
        let snap = ctx.read_snapshot(&store, &opts).await?;
        let rv = snap.rv();
        let cursor = store.watch_matching(rv, &filter)?;
        let reader = SnapshotReader::new(snap, filter.clone(), None, None);
        (cursor, Some(Box::new(reader)), rv)
    } else {
        let from = match opts.resource_version {
            ResourceVersion::At(rv) => rv,
            ResourceVersion::Any => store.rv(),
            ResourceVersion::Unset => ctx.consistent_snapshot(&store).await?.rv(),
        };
        match store.watch_matching(from, &filter) {
            Ok(c) => (c, None, from),
            // kube-apiserver answers 200 and a single ERROR event for a too-old RV.
            Err(e) => {
                let status = ApiError::from(e).to_status();
                let mut out = listwatch_codec::ChunkWriter::unbounded();
                writer.error_event(&mut out, &status.body);
                return Ok(typed(StatusCode::OK, content_type, full(out.into_vec())));
            }
        }
    };
    let spec = WatchSpec {
        initial: initial_reader,
        initial_events_end: opts.flags.send_initial_events == Some(true)
            && opts.flags.allow_watch_bookmarks,
        initial_rv,
        bookmarks: opts.flags.allow_watch_bookmarks,
        bookmark_every: ctx.config.bookmark_interval,
        deadline: deadline.into_std(),
        chunk: ctx.config.chunk_bytes,
    };
    let encoder = WatchEncoder::new(cursor, filter, writer, spec, Instant::now().into_std());
    let body = StreamedBody::watch(encoder, list_seat, gzip_ok);
    Ok(encoded(
        typed(StatusCode::OK, content_type, BodyExt::boxed(body)),
        gzip_ok,
        gzip_ok,
    ))
}

/// Reads a request body as JSON, bounded by `max_body_bytes` (writes, access reviews). A
/// protobuf body of a built-in kind (`kubectl auth can-i` posts its review so) is read
/// through the schema's protobuf → JSON transcoder; other media types get 415.
pub async fn read_request_body(config: &ServerConfig, payload: Payload) -> Result<Bytes, ApiError> {
    let ct = payload
        .content_type
        .as_deref()
        .unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    let protobuf = media == listwatch_codec::protobuf::PROTOBUF;
    if media != "application/json" && !media.is_empty() && !protobuf {
        return Err(ApiError::UnsupportedMediaType("the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf".to_string()));
    }
    let buf = read_body_bytes(config, payload.body).await?;
    if protobuf {
        return listwatch_codec::protobuf::request_body_to_json(&buf).map(Bytes::from);
    }
    Ok(buf)
}

/// Reads a request body as it is, bounded by `max_body_bytes`.
async fn read_body_bytes(config: &ServerConfig, body: RequestBody) -> Result<Bytes, ApiError> {
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::BadRequest(format!("error reading the request body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > config.max_body_bytes {
                return Err(ApiError::TooLarge("the request body is too large".into()));
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(buf.freeze())
}
