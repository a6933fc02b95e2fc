//! `SnapshotReader`: walks a snapshot for one LIST page — filter, limit, and where the next
//! page starts — in bounded steps, so a response is produced chunk by chunk.

use std::sync::Arc;

use crate::record::Record;
use crate::snapshot::{Filter, Snapshot};

/// A LIST page in progress over one snapshot. Cloning is cheap (the snapshot is shared),
/// which lets an encoder look ahead to learn the continue token before writing the header.
#[derive(Clone)]
pub struct SnapshotReader {
    snap: Snapshot,
    filter: Arc<Filter>,
    /// Resume point: `(key, exclusive)`.
    at: (Arc<str>, bool),
    limit: Option<u64>,
    emitted: u64,
    last_emitted: Option<Arc<str>>,
    exhausted: bool,
}

impl SnapshotReader {
    /// Reads `snap` through `filter` from `start` (inclusive; the filter's prefix when
    /// `None`), stopping after `limit` matching records.
    pub fn new(
        snap: Snapshot,
        filter: Arc<Filter>,
        start: Option<&str>,
        limit: Option<u64>,
    ) -> Self {
        let start: Arc<str> = start.unwrap_or(filter.prefix()).into();
        SnapshotReader {
            snap,
            filter,
            at: (start, false),
            limit,
            emitted: 0,
            last_emitted: None,
            exhausted: false,
        }
    }

    /// Whether this page is the whole snapshot, from its start (no namespace, selector or
    /// limit, nothing read yet).
    pub fn reads_whole_snapshot(&self) -> bool {
        self.limit.is_none()
            && self.emitted == 0
            && !self.exhausted
            && self.filter.prefix().is_empty()
            && self.filter.selects_all_in_prefix()
            && self.at.0.is_empty()
            && !self.at.1
    }

    /// Whether this page walks one value of the snapshot's field index (a kubelet's
    /// `spec.nodeName=` read): one node's records, which no other node's reads share.
    pub fn reads_by_index(&self) -> bool {
        self.snap
            .index()
            .is_some_and(|ix| self.filter.field_equals(ix.field()).is_some())
    }

    /// The snapshot being read.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// Visits up to `max_scan` records (matching or not) and calls `visit` for each match;
    /// `visit` returns false to stop early (e.g. a full chunk). Returns false once the page
    /// is complete.
    pub fn next_batch(
        &mut self,
        max_scan: usize,
        mut visit: impl FnMut(&Arc<Record>) -> bool,
    ) -> bool {
        if self.exhausted {
            return false;
        }
        let mut scanned = 0;
        let mut full = false;
        // The keys are cloned once a batch, not per record: their reference counts are
        // shared by every reader of the snapshot, on every thread.
        let stop_key;
        {
            let (mut stop_at, mut last_emitted) = (None, None);
            let (key, exclusive) = (&self.at.0, self.at.1);
            // A selector on the indexed field walks that value's records only (the
            // kubelet's `spec.nodeName=` LIST reads its node's pods, not the collection).
            let by_index = self.snap.index().and_then(|ix| {
                let value = self.filter.field_equals(ix.field())?;
                self.snap.range_by_field(ix.field(), value, key, exclusive)
            });
            let mut iter = match by_index {
                Some(it) => Either::Index(it),
                None => Either::Keys(self.snap.range(key, exclusive, self.filter.prefix())),
            };
            loop {
                if self.limit.is_some_and(|l| self.emitted >= l) {
                    full = true;
                    break;
                }
                if scanned >= max_scan {
                    break;
                }
                let Some(r) = iter.next() else {
                    self.exhausted = true;
                    break;
                };
                scanned += 1;
                stop_at = Some(r);
                if self.filter.matches(r) {
                    self.emitted += 1;
                    last_emitted = Some(r);
                    if !visit(r) {
                        break;
                    }
                }
            }
            if let Some(r) = last_emitted {
                self.last_emitted = Some(r.key().clone());
            }
            stop_key = stop_at.map(|r: &Arc<Record>| r.key().clone());
        }
        if let Some(k) = stop_key {
            self.at = (k, true);
        }
        if full {
            self.exhausted = true;
        }
        !self.exhausted
    }

    /// After the page is complete: the key the last returned record had, when the limit
    /// cut the page short and more keys remain in range (so a continue token is due).
    pub fn continue_after(&self) -> Option<&Arc<str>> {
        let last = self.last_emitted.as_ref()?;
        if self.limit.is_none_or(|l| self.emitted < l) {
            return None;
        }
        self.snap
            .range(last, true, self.filter.prefix())
            .next()
            .map(|_| last)
    }

    /// Objects left after this page, when exact (no selectors beyond the namespace).
    pub fn remaining(&self) -> Option<u64> {
        let last = self.continue_after()?;
        self.filter
            .selects_all_in_prefix()
            .then(|| self.snap.range(last, true, self.filter.prefix()).count() as u64)
    }
}

/// One of two iterators over records, without boxing per batch.
enum Either<I, K> {
    Index(I),
    Keys(K),
}

impl<'a, I, K> Iterator for Either<I, K>
where
    I: Iterator<Item = &'a Arc<Record>>,
    K: Iterator<Item = &'a Arc<Record>>,
{
    type Item = &'a Arc<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Either::Index(i) => i.next(),
            Either::Keys(k) => k.next(),
        }
    }
}
