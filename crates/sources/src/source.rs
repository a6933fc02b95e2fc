//! The `Source` seam: what the server asks of whatever keeps the stores current. The server
//! holds an `Arc<dyn Source>` and never names a concrete source, so a new source (etcd, a
//! host's own feed, a test double) plugs in without touching the serving code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use listwatch_core::{ApiError, WriteOptions};
use listwatch_store::Store;

use crate::Registry;

/// A boxed future, so the traits below stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A successful write: HTTP code and the body to answer with.
#[derive(Debug)]
pub struct WriteResult {
    /// 200 or 201.
    pub code: u16,
    /// JSON body.
    pub body: Bytes,
}

/// Keeps a [`Registry`]'s stores equal to some source of truth.
pub trait Source: Send + Sync + 'static {
    /// The served resources and their stores.
    fn registry(&self) -> &Registry;

    /// The revision a consistent read of `store` must reach: the source's current
    /// revision, read linearizably (for etcd, a round trip plus a progress request).
    fn consistent_revision<'a>(&'a self, store: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>>;

    /// A reader waits for `store` to reach an RV it has not: ask the source to report its
    /// progress now rather than at its next periodic mark. Sources that apply every change
    /// before acknowledging it have nothing to do.
    fn request_progress(&self, _store: &Store) {}

    /// Whether `store`'s cache is vouched for (loaded, not relisting after a lost event).
    fn is_ready(&self, store: &Store) -> bool {
        store.is_ready()
    }

    /// Whether the source can answer a consistent read now (`Err`: why not). `/readyz` fails
    /// while it cannot.
    fn health(&self) -> Result<(), String> {
        Ok(())
    }

    /// The name of [`Self::health`]'s line in `/readyz?verbose` (`etcd` for etcd, as
    /// kube-apiserver's).
    fn health_check_name(&self) -> &'static str {
        "store"
    }

    /// Stored values the source could not read and skipped, by resource and reason (for
    /// `listwatch_source_values_skipped_total`).
    fn skipped_values(&self) -> Vec<(String, &'static str, u64)> {
        Vec::new()
    }

    /// The source's own metrics in OpenMetrics text (without `# EOF`), added to `/metrics`.
    fn metrics_text(&self) -> String {
        String::new()
    }

    /// The write verbs, when this source accepts writes.
    fn writer(&self) -> Option<&dyn SourceWriter> {
        None
    }

    /// The answer to a write when [`Self::writer`] is `None`: why this source takes none.
    fn refuse_write(&self) -> ApiError {
        ApiError::MethodNotAllowed
    }

    /// Stops the source's background work and waits for it to end (etcd's
    /// `watchableStore.Close()`): after this, the stores no longer change.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// One write verb and what it names.
#[derive(Clone, Copy, Debug)]
pub enum WriteOp<'a> {
    /// POST: creates the object `body` describes.
    Create {
        /// The object's JSON.
        body: &'a [u8],
    },
    /// PUT: replaces the object `name`.
    Update {
        /// The object's name.
        name: &'a str,
        /// The replacement's JSON.
        body: &'a [u8],
    },
    /// DELETE: removes the object `name`.
    Delete {
        /// The object's name.
        name: &'a str,
    },
}

/// One write as a [`SourceWriter`] takes it: the verb and what it names, where, and how.
#[derive(Clone, Copy)]
pub struct WriteRequest<'a> {
    /// The resource's store.
    pub store: &'a Arc<Store>,
    /// The object's namespace (`None` for a cluster-scoped resource).
    pub namespace: Option<&'a str>,
    /// The verb and the object.
    pub op: WriteOp<'a>,
    /// `dryRun`, delete propagation.
    pub options: WriteOptions,
}

impl<'a> WriteRequest<'a> {
    /// `op` on `store`'s object in `namespace`, with `options`.
    pub fn new(
        store: &'a Arc<Store>,
        namespace: Option<&'a str>,
        op: WriteOp<'a>,
        options: WriteOptions,
    ) -> Self {
        Self {
            store,
            namespace,
            op,
            options,
        }
    }
}

/// The write verbs of a writable source (POST, PUT, DELETE), checked the same way by every
/// source (`objects`). PATCH and `scale` writes reach a source as a [`WriteOp::Update`] (the
/// server patches the stored object and sends it here), so they are checked as a PUT is.
/// With `options.dry_run` a write is checked and answered exactly as it would be, and
/// nothing is committed (no new revision, no event).
pub trait SourceWriter: Send + Sync {
    /// Applies `write.op` to its store.
    fn write<'a>(&'a self, write: WriteRequest<'a>)
    -> BoxFuture<'a, Result<WriteResult, ApiError>>;
}
