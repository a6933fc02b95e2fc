//! Request handlers: where a request's resourceVersion semantics pick the snapshot or
//! cursor it is served from.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use listwatch_codec::protobuf::{self as pb, ProtoObjects};
use listwatch_codec::{
    ChunkWriter, Encoding, ListEncoder, ListFormat, WatchEncoder, WatchSpec, watch::error_body,
};
use listwatch_core::options::list_prefix;
use listwatch_core::{ApiError, ContinueToken, ListOptions, ObjectRef, ResourceVersion, RvMatch};
use listwatch_store::{Filter, Snapshot, SnapshotReader, Store, StoreError};
use tokio::time::Instant;

use crate::App;
use crate::body::{ResponseBody, StreamedBody, full};
use crate::request::{ApiRequest, Rendering};

/// A handler's answer: a response, or an error to render as a `Status`.
pub type Answer = Result<Response<ResponseBody>, ApiError>;

fn json_response(code: u16, body: ResponseBody) -> Response<ResponseBody> {
    typed_response(code, "application/json", body)
}

/// A response with `Content-Type: content_type` and kube-apiserver's `Cache-Control`.
fn typed_response(
    code: u16,
    content_type: &'static str,
    body: ResponseBody,
) -> Response<ResponseBody> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    h.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// Renders an error as kube-apiserver does: the `Status` body, its code, `Retry-After`.
pub fn error_response(e: &ApiError) -> Response<ResponseBody> {
    error_response_in(e, Encoding::Json)
}

/// [`error_response`] in `encoding` (a protobuf client gets a protobuf `Status`).
pub fn error_response_in(e: &ApiError, encoding: Encoding) -> Response<ResponseBody> {
    let s = e.to_status();
    let mut r = match encoding {
        Encoding::Protobuf => match pb::status_to_protobuf(&s.body) {
            Ok(body) => typed_response(s.code, pb::PROTOBUF, full(body)),
            Err(_) => json_response(s.code, full(with_newline(Bytes::from(s.body)))),
        },
        Encoding::Json => json_response(s.code, full(with_newline(Bytes::from(s.body)))),
    };
    if let Some(secs) = s.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    r
}

/// Content-negotiation headers of a streamed response: `Vary` whenever gzip was offered,
/// `Content-Encoding` when the body is actually compressed.
fn encoded(mut r: Response<ResponseBody>, offered: bool, gzip: bool) -> Response<ResponseBody> {
    if gzip {
        r.headers_mut().insert(
            header::CONTENT_ENCODING,
            http::HeaderValue::from_static("gzip"),
        );
    }
    if offered {
        r.headers_mut().insert(
            header::VARY,
            http::HeaderValue::from_static("Accept-Encoding"),
        );
    }
    r
}

impl App {
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
        if store.rv() < rv {
            self.source.request_progress(store);
        }
        store.wait_for(rv, self.config.rv_wait).await?;
        Ok(())
    }

    /// A snapshot at least as new as the source's current revision (consistent read).
    async fn consistent_snapshot(&self, store: &Store) -> Result<Snapshot, ApiError> {
        let target = self.source.consistent_revision(store).await?;
        self.wait_for(store, target).await?;
        Ok(store.current())
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

    /// A request addressed to a resource: the read verbs, or the source's writer.
    pub(crate) async fn resource(
        &self,
        mut req: ApiRequest,
        store: Arc<Store>,
        namespace: Option<String>,
        name: Option<String>,
    ) -> Answer {
        let ns = namespace.as_deref();
        match (req.verb, name) {
            (listwatch_core::Verb::List, _) => {
                self.ready(&store)?;
                let (opts, render) = req.take_read()?;
                self.list(store, ns, opts, render).await
            }
            (listwatch_core::Verb::Watch, name) => {
                self.ready(&store)?;
                let (mut opts, render) = req.take_read()?;
                if let Some(name) = name {
                    // Watching one object is a watch with a name field selector.
                    opts.field_selector
                        .terms
                        .push(listwatch_core::fields::FieldTerm {
                            field: "metadata.name".into(),
                            value: name,
                            negated: false,
                        });
                }
                self.watch(store, ns, opts, render).await
            }
            (listwatch_core::Verb::Get, Some(name)) => {
                self.ready(&store)?;
                let (opts, render) = req.take_read()?;
                let snap = self.read_snapshot(&store, &opts).await?;
                let key = store.info().key(ns.unwrap_or(""), &name);
                let Some(r) = snap.get(&key) else {
                    return Err(ApiError::NotFound(ObjectRef::new(store.info(), &name)));
                };
                if render.encoding == Encoding::Protobuf {
                    let mut proto = protobuf_objects(store.info(), render.metadata_only)?;
                    let mut body = Vec::with_capacity(r.bytes().len());
                    proto
                        .write_envelope(r, None, &mut body)
                        .map_err(|e| ApiError::Internal(format!("encoding as protobuf: {e}")))?;
                    return Ok(typed_response(200, pb::PROTOBUF, full(body)));
                }
                match render.table {
                    None if render.metadata_only => {
                        let md = r.metadata();
                        let mut body = Vec::with_capacity(md.len() + 96);
                        body.extend_from_slice(pb::PARTIAL_HEAD);
                        body.extend_from_slice(&md);
                        body.extend_from_slice(b"}\n");
                        Ok(json_response(200, full(body)))
                    }
                    None => Ok(json_response(200, full(with_newline(r.bytes().clone())))),
                    Some(t) => {
                        let mut out = ChunkWriter::new(usize::MAX >> 1);
                        t.write_single(&mut out, r, None, listwatch_core::time::unix_now());
                        out.put_slice(b"\n");
                        Ok(json_response(200, full(out.into_vec())))
                    }
                }
            }
            (verb, name) => {
                let writer = self
                    .source
                    .writer()
                    .ok_or_else(|| self.source.refuse_write())?;
                let options = listwatch_core::WriteOptions::from_params(&req.params, verb)?;
                let w = match (verb, name.as_deref()) {
                    (listwatch_core::Verb::Create, None) => {
                        let bytes = self
                            .read_body(req.content_type.as_deref(), req.body)
                            .await?;
                        writer.create(&store, ns, &bytes, options).await?
                    }
                    (listwatch_core::Verb::Update, Some(name)) => {
                        let bytes = self
                            .read_body(req.content_type.as_deref(), req.body)
                            .await?;
                        writer.update(&store, ns, name, &bytes, options).await?
                    }
                    (listwatch_core::Verb::Delete, Some(name)) => {
                        let bytes = self
                            .read_body(req.content_type.as_deref(), req.body)
                            .await?;
                        let options =
                            listwatch_core::WriteOptions::for_delete(&req.params, &bytes)?;
                        writer.delete(&store, ns, name, options).await?
                    }
                    _ => return Err(ApiError::MethodNotAllowed),
                };
                Ok(json_response(w.code, full(with_newline(w.body))))
            }
        }
    }

    async fn read_body(
        &self,
        content_type: Option<&str>,
        body: crate::RequestBody,
    ) -> Result<Bytes, ApiError> {
        read_request_body(&self.config, content_type, body).await
    }

    async fn list(
        &self,
        store: Arc<Store>,
        ns: Option<&str>,
        opts: ListOptions,
        render: Rendering,
    ) -> Answer {
        let Rendering {
            encoding,
            table,
            metadata_only,
            gzip: gzip_ok,
        } = render;
        let info = store.info().clone();
        let proto = match encoding {
            Encoding::Protobuf => Some(protobuf_objects(&info, metadata_only)?),
            Encoding::Json => None,
        };
        let prefix = list_prefix(&info, ns);
        let (snap, start) = match &opts.continue_token {
            Some(token) if token.rv > 0 => {
                let rv = token.rv as u64;
                self.wait_for(&store, rv).await?;
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
            None => (self.read_snapshot(&store, &opts).await?, None),
        };
        let limit = opts.page_limit();
        if limit.is_some() {
            // Later pages name this RV in their token: keep it so they are O(1) to serve.
            store.retain(&snap);
        }
        let filter = Arc::new(Filter::new(&info, ns, &opts));
        let reader = SnapshotReader::new(snap, filter, start.as_deref(), limit);
        let encoder = ListEncoder::new(
            reader,
            proto,
            info.list_kind(),
            info.api_version(),
            prefix,
            limit.is_some(),
            match table {
                Some(t) => ListFormat::Table(t, listwatch_core::time::unix_now()),
                None if metadata_only => ListFormat::Metadata,
                None => ListFormat::Objects,
            },
            self.config.chunk_bytes,
        );
        let (body, gzip) = StreamedBody::list(encoder, gzip_ok);
        let content_type = match encoding {
            Encoding::Protobuf => pb::PROTOBUF,
            Encoding::Json => "application/json",
        };
        Ok(encoded(
            typed_response(200, content_type, BodyExt::boxed(body)),
            gzip_ok,
            gzip,
        ))
    }

    async fn watch(
        &self,
        store: Arc<Store>,
        ns: Option<&str>,
        opts: ListOptions,
        render: Rendering,
    ) -> Answer {
        let Rendering {
            encoding,
            table,
            metadata_only,
            gzip: gzip_ok,
        } = render;
        let info = store.info().clone();
        // Refused before the watch starts when the kind has no protobuf form.
        let proto = match encoding {
            Encoding::Protobuf => Some(protobuf_objects(&info, metadata_only)?),
            Encoding::Json => None,
        };
        let content_type = match encoding {
            Encoding::Protobuf => pb::PROTOBUF_WATCH,
            Encoding::Json => "application/json",
        };
        let filter = Arc::new(Filter::new(&info, ns, &opts));
        let timeout = match opts.timeout_seconds {
            Some(s) if s > 0 => Duration::from_secs(s as u64),
            // kube-apiserver takes a negative timeout as it is: the watch ends at once.
            Some(s) if s < 0 => Duration::ZERO,
            _ => {
                // kube-apiserver: a random duration in [min-request-timeout, 2×) so watches
                // do not all end (and re-list) at once.
                let base = self.config.min_request_timeout.as_secs_f64();
                Duration::from_secs_f64(base * (1.0 + rand::random::<f64>()))
            }
        };
        let deadline = Instant::now() + timeout;
        let initial = opts.wants_initial_events();
        let (cursor, initial_reader, initial_rv) = if initial {
            let snap = self.read_snapshot(&store, &opts).await?;
            let rv = snap.rv();
            let cursor = store.watch_from(rv)?;
            let reader = SnapshotReader::new(snap, filter.clone(), None, None);
            (cursor, Some(reader), rv)
        } else {
            let from = match opts.resource_version {
                ResourceVersion::At(rv) => rv,
                ResourceVersion::Any => store.rv(),
                ResourceVersion::Unset => self.consistent_snapshot(&store).await?.rv(),
            };
            match store.watch_from(from) {
                Ok(c) => (c, None, from),
                // kube-apiserver answers 200 and a single ERROR event for a too-old RV.
                Err(e) => {
                    let status = ApiError::from(e).to_status();
                    let body = match encoding {
                        Encoding::Protobuf => pb::watch_error_body(&status.body).map_err(|e| {
                            ApiError::Internal(format!("encoding as protobuf: {e}"))
                        })?,
                        Encoding::Json => error_body(&status.body),
                    };
                    return Ok(typed_response(200, content_type, full(body)));
                }
            }
        };
        let spec = WatchSpec {
            initial: initial_reader,
            initial_events_end: opts.send_initial_events == Some(true)
                && opts.allow_watch_bookmarks,
            initial_rv,
            bookmarks: opts.allow_watch_bookmarks,
            bookmark_every: self.config.bookmark_interval,
            deadline: deadline.into_std(),
            chunk: self.config.chunk_bytes,
            proto,
            table,
            metadata_only,
        };
        let encoder = WatchEncoder::new(cursor, filter, spec, Instant::now().into_std());
        let body = StreamedBody::watch(encoder, Some(store.drain_signal()), gzip_ok);
        Ok(encoded(
            typed_response(200, content_type, BodyExt::boxed(body)),
            gzip_ok,
            gzip_ok,
        ))
    }
}

/// The protobuf writer of `info`'s objects (or their metadata); 406 for kinds without a
/// protobuf form (negotiation already steers clients away from it).
fn protobuf_objects(
    info: &listwatch_core::ResourceInfo,
    metadata_only: bool,
) -> Result<ProtoObjects, ApiError> {
    ProtoObjects::new(info, metadata_only)
        .ok_or_else(|| ApiError::NotAcceptable(format!("{} has no protobuf form", info.resource)))
}

fn with_newline(b: Bytes) -> Bytes {
    let mut v = Vec::with_capacity(b.len() + 1);
    v.extend_from_slice(&b);
    v.push(b'\n');
    Bytes::from(v)
}

/// Reads a request body as JSON, bounded by `max_body_bytes` (writes, access reviews). A
/// protobuf body of a built-in kind (`kubectl auth can-i` posts its review so) is read
/// through the schema's protobuf → JSON transcoder; other media types get 415.
pub async fn read_request_body(
    config: &crate::ServerConfig,
    content_type: Option<&str>,
    body: crate::RequestBody,
) -> Result<Bytes, ApiError> {
    let ct = content_type.unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    let protobuf = media == pb::PROTOBUF;
    if media != "application/json" && !media.is_empty() && !protobuf {
        return Err(ApiError::UnsupportedMediaType("the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf".to_string()));
    }
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
    if protobuf {
        return protobuf_body_as_json(&buf).map(Bytes::from);
    }
    Ok(buf.freeze())
}

/// A protobuf request body (`k8s\0` + `runtime.Unknown`) as the JSON of the same object.
fn protobuf_body_as_json(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let bad = |e: listwatch_protobuf::ProtoError| {
        ApiError::BadRequest(format!("the protobuf body could not be decoded: {e}"))
    };
    let schema = listwatch_protobuf::Schema::kubernetes();
    let mut out = Vec::with_capacity(body.len() * 2);
    // The same reading as a stored value's, without storage's read-time defaults.
    match listwatch_protobuf::storage_to_json(
        &mut listwatch_protobuf::JsonWriter::new(schema),
        schema,
        body,
        &mut out,
    ) {
        Ok(_) => Ok(out),
        Err(listwatch_protobuf::ProtoError::UnknownKind { api_version, kind }) => {
            Err(ApiError::UnsupportedMediaType(format!(
                "no protobuf form for {api_version}, Kind={kind}"
            )))
        }
        Err(e) => Err(bad(e)),
    }
}
