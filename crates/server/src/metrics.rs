//! The per-request accounting: every response body is wrapped in a [`MeteredBody`] that
//! counts its bytes, holds the request's admission and its place on the connection, and
//! tells the app's [`Metrics`] (crates/metrics: the `/metrics` families and the request log)
//! once when the response ends or is dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use listwatch_metrics::{Metrics, RequestInfo};

use crate::body::ResponseBody;

/// A response body that counts its bytes, holds the in-flight gauges, and records the
/// request (counter, histogram, log line) exactly once when the response ends or is dropped.
pub struct MeteredBody {
    inner: ResponseBody,
    metrics: Arc<Metrics>,
    info: RequestInfo,
    sent: u64,
    /// Admission held for as long as the response streams (see `limits`).
    _admission: Option<crate::limits::Admission>,
    /// The request's place on its connection: told when the body waits for the client.
    in_flight: Option<crate::connection::InFlight>,
    /// The body handed out its last frame (a body dropped before that was abandoned).
    finished: bool,
    /// The request's span (see `serve_connection`), entered while the body streams so the
    /// encoder's lines and the request log line are found with the request's.
    span: tracing::Span,
}

impl MeteredBody {
    /// Wraps `inner`; LIST and WATCH count as long-running while the body lives.
    pub fn new(inner: ResponseBody, metrics: Arc<Metrics>, info: RequestInfo) -> Self {
        metrics.started(&info);
        MeteredBody {
            _admission: None,
            in_flight: None,
            inner,
            metrics,
            info,
            sent: 0,
            finished: false,
            span: tracing::Span::current(),
        }
    }
}

impl MeteredBody {
    /// Keeps `admission` (in-flight slots, buffer budget) until the body is done.
    pub fn hold(mut self, admission: Option<crate::limits::Admission>) -> Self {
        self._admission = admission;
        self
    }

    /// Keeps the request's place on its connection until the body is done.
    pub fn on_connection(mut self, in_flight: Option<crate::connection::InFlight>) -> Self {
        self.in_flight = in_flight;
        self
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        let _span = self.span.clone().entered();
        if !self.finished
            && let Some(c) = &self.in_flight
        {
            c.cancelled();
        }
        self.metrics.finished(&self.info, self.sent);
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = crate::body::BodyCut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let _span = this.span.enter();
        if let Some(c) = &this.in_flight {
            c.polled();
        }
        let p = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(p, Poll::Ready(None)) || this.inner.is_end_stream() {
            this.finished = true;
        }
        if let Poll::Ready(Some(Ok(f))) = &p
            && let Some(d) = f.data_ref()
        {
            this.sent += d.len() as u64;
            if let Some(c) = &this.in_flight {
                c.produced();
            }
        }
        p
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
