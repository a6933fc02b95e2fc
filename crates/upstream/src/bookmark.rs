//! A consistent read's proof that an idle collection is unchanged, by a watch bookmark.
//!
//! A short WATCH from the cache's RV `s` with bookmarks and `timeoutSeconds=3`: kube-apiserver
//! serves it from its watch cache, sends every event after `s` in order, and schedules one
//! bookmark two seconds before the watch's deadline (about a second after it opens) at the
//! newest RV its cache has processed. The probe before it was a consistent read, which made
//! that cache catch up with etcd, so the bookmark normally carries an RV at or past the
//! probe's. A bookmark at `b` with no event before it shows that nothing in the collection
//! changed between `s` and `b`: the same fact a metadata LIST shows by comparing every item,
//! for a few hundred bytes instead of one item's metadata per object.
//!
//! Anything else (an event, an error, no bookmark in time, a bookmark short of the target:
//! watch cache off, an older or different server) leaves the proof to the metadata LIST.

use std::time::Duration;

use crate::client::{Lines, Upstream, parse_rv};
use crate::follower::{Object, watch_event};
use listwatch_kubeclient::percent_encode;

/// The proof watch's `timeoutSeconds`: kube-apiserver's cacher schedules its one bookmark
/// two seconds before the deadline, so 3 s asks for it about a second after the watch opens
/// (2 s would put it in the past, and no bookmark would come).
const TIMEOUT_SECONDS: u64 = 3;

/// Longest silence accepted on the proof watch: the bookmark is dispatched on the cacher's
/// one-second timer (±25 %) after its bucket comes due.
const SILENCE: Duration = Duration::from_secs(TIMEOUT_SECONDS + 2);

/// What a proof watch showed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    /// No event between the cache's RV and this bookmark RV (at or past the target).
    Unchanged(u64),
    /// An event at this RV: the collection did change; the stream has it to deliver.
    Changed(u64),
    /// No proof either way (with why, for the log).
    Unknown(String),
}

/// Watches `path` from `from` until a bookmark at or past `target`, an event, or the end;
/// the bytes read are added to `*bytes`.
pub(crate) async fn prove(
    up: &Upstream,
    path: &str,
    from: u64,
    target: u64,
    bytes: &mut usize,
) -> Shown {
    let q = format!(
        "{path}?watch=1&allowWatchBookmarks=true&timeoutSeconds={TIMEOUT_SECONDS}&resourceVersion={}",
        percent_encode(&from.to_string())
    );
    let resp = match up.get(&q).await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return Shown::Unknown(format!("proof watch answered {}", r.status())),
        Err(e) => return Shown::Unknown(e.to_string()),
    };
    // The first line decides: kube-apiserver sends such a watch one bookmark, after any
    // events.
    let line = match Lines::new(resp).next(SILENCE).await {
        Ok(Some(l)) => l,
        Ok(None) => return Shown::Unknown("proof watch ended without a bookmark".into()),
        Err(e) => return Shown::Unknown(e),
    };
    *bytes += line.len();
    let Some((kind, object)) = watch_event(&line) else {
        return Shown::Unknown("proof watch: not a watch event".into());
    };
    let rv = match serde_json::from_slice::<Object>(&line[object.0..object.1]) {
        Ok(o) => parse_rv(&o.metadata.resource_version).unwrap_or(0),
        Err(e) => return Shown::Unknown(format!("proof watch event: {e}")),
    };
    match kind {
        "BOOKMARK" if rv >= target => Shown::Unchanged(rv),
        "BOOKMARK" => Shown::Unknown(format!("bookmark at {rv}, short of {target}")),
        "ADDED" | "MODIFIED" | "DELETED" => Shown::Changed(rv),
        other => Shown::Unknown(format!("proof watch event {other}")),
    }
}
