//! `Snapshot`: an immutable version of a whole collection at one resourceVersion, and
//! `Filter`: what a request selects from it.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use imbl::{OrdMap, OrdSet};
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_core::{ListOptions, ResourceInfo};

use crate::record::{EncodedForm, FieldRef, Record};

/// The persistent map behind a snapshot: key → record, ordered by key bytes (the order
/// etcd and kube-apiserver list in).
pub type RecordMap = OrdMap<Arc<str>, Arc<Record>>;

/// Keys by the value of one selectable field (pods: `spec.nodeName`, the kubelet's
/// selector): `(value, key)` pairs, so one value's records are a range, in key order.
/// Structurally shared like [`RecordMap`]; an absent field indexes as `""`.
#[derive(Clone, Debug)]
pub struct FieldIndex {
    /// Position of the field in the resource's `field_selectors`.
    field: usize,
    keys: OrdSet<(Arc<str>, Arc<str>)>,
}

impl FieldIndex {
    /// The index of field `field` over `items`.
    pub fn build(field: usize, items: &RecordMap) -> FieldIndex {
        let mut ix = FieldIndex {
            field,
            keys: OrdSet::new(),
        };
        for r in items.values() {
            ix.insert(r);
        }
        ix
    }

    fn entry(&self, r: &Record) -> (Arc<str>, Arc<str>) {
        (r.field(self.field).unwrap_or("").into(), r.key().clone())
    }

    /// Adds `r` under its field's value.
    pub fn insert(&mut self, r: &Record) {
        self.keys.insert(self.entry(r));
    }

    /// Removes `r` (as it was: its own field value).
    pub fn remove(&mut self, r: &Record) {
        self.keys.remove(&self.entry(r));
    }

    /// The field this index is over.
    pub fn field(&self) -> usize {
        self.field
    }
}

/// Whether `key` lies under `prefix`. An empty prefix (every namespace) is not compared:
/// a call to memcmp a record, per reader, was 1.7 % of a storm of protobuf LISTs.
fn in_prefix(key: &str, prefix: &str) -> bool {
    prefix.is_empty() || key.starts_with(prefix)
}

/// An immutable collection at one RV. Cloning is O(1): the map is structurally shared.
#[derive(Clone, Debug)]
pub struct Snapshot {
    rv: u64,
    items: RecordMap,
    index: Option<FieldIndex>,
    /// Sums over all the items that encoders memoize, shared by every copy of these items.
    totals: Arc<Totals>,
}

/// The protobuf list length of all of a snapshot's items, per form (`u64::MAX` until an
/// encoder has summed it): a storm of whole-collection protobuf LISTs of one snapshot
/// then states its length without a pass over the items before its first byte.
#[derive(Debug)]
struct Totals([AtomicU64; 2]);

impl Default for Totals {
    fn default() -> Self {
        Totals([AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)])
    }
}

impl Snapshot {
    /// A snapshot of `items` at `rv`.
    pub fn new(rv: u64, items: RecordMap) -> Self {
        Snapshot {
            rv,
            items,
            index: None,
            totals: Arc::default(),
        }
    }

    /// A snapshot of `items` at `rv` with `index` kept over the same items.
    pub fn indexed(rv: u64, items: RecordMap, index: Option<FieldIndex>) -> Self {
        Snapshot {
            rv,
            items,
            index,
            totals: Arc::default(),
        }
    }

    /// The field index kept with the items, if the resource has one.
    pub fn index(&self) -> Option<&FieldIndex> {
        self.index.as_ref()
    }

    /// The records whose indexed field is `value`, with key ≥ `start` (> when
    /// `exclusive`), in key order; `None` when this snapshot has no index over `field`.
    pub fn range_by_field<'a>(
        &'a self,
        field: usize,
        value: &str,
        start: &str,
        exclusive: bool,
    ) -> Option<impl Iterator<Item = &'a Arc<Record>> + 'a> {
        let ix = self.index.as_ref().filter(|ix| ix.field == field)?;
        let value: Arc<str> = value.into();
        let lower = (value.clone(), Arc::<str>::from(start));
        let lower = if exclusive {
            Bound::Excluded(lower)
        } else {
            Bound::Included(lower)
        };
        Some(
            ix.keys
                .range((lower, Bound::Unbounded))
                .take_while(move |(v, _)| *v == value)
                .filter_map(|(_, k)| self.items.get(k)),
        )
    }

    /// The RV this snapshot represents.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The same items labelled with a newer RV (nothing changed in between).
    pub fn at(&self, rv: u64) -> Snapshot {
        Snapshot {
            rv,
            items: self.items.clone(),
            index: self.index.clone(),
            totals: self.totals.clone(),
        }
    }

    /// The summed encoded length of all items in `form`, once an encoder has set it.
    pub fn encoded_total(&self, form: EncodedForm) -> Option<usize> {
        match self.totals.0[form as usize].load(Ordering::Relaxed) {
            u64::MAX => None,
            n => usize::try_from(n).ok(),
        }
    }

    /// Records the summed encoded length of all items in `form`.
    pub fn set_encoded_total(&self, form: EncodedForm, total: usize) {
        if let Ok(n) = u64::try_from(total)
            && n != u64::MAX
        {
            self.totals.0[form as usize].store(n, Ordering::Relaxed);
        }
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no objects.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The object at `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<Record>> {
        self.items.get(key)
    }

    /// The underlying map (for building modified versions).
    pub fn items(&self) -> &RecordMap {
        &self.items
    }

    /// Records with key ≥ `start` (or > `start` when `exclusive`) that begin with `prefix`,
    /// in key order. Each call is one O(log n) seek, so streaming a snapshot in chunks costs
    /// one seek per chunk, not per record.
    pub fn range<'a>(
        &'a self,
        start: &'a str,
        exclusive: bool,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Record>> + 'a {
        let lower = if start < prefix {
            Bound::Included(prefix)
        } else if exclusive {
            Bound::Excluded(start)
        } else {
            Bound::Included(start)
        };
        self.items
            .range::<_, str>((lower, Bound::Unbounded))
            .take_while(move |(k, _)| in_prefix(k, prefix))
            .map(|(_, v)| v)
    }
}

/// What one request selects: a key prefix (namespace) plus label and field selectors,
/// resolved once against the resource so matching a record does no lookups by name.
pub struct Filter {
    prefix: String,
    labels: LabelSelector,
    fields: Vec<(FieldRef, String, bool)>,
}

impl Filter {
    /// The filter for a request on `info` in `namespace` (None: all) with `opts`' selectors.
    pub fn new(info: &ResourceInfo, namespace: Option<&str>, opts: &ListOptions) -> Filter {
        Self::from_parts(
            info,
            namespace,
            opts.label_selector.clone(),
            &opts.field_selector,
        )
    }

    /// The filter from explicit selectors.
    pub fn from_parts(
        info: &ResourceInfo,
        namespace: Option<&str>,
        labels: LabelSelector,
        fields: &FieldSelector,
    ) -> Filter {
        let fields = fields
            .terms
            .iter()
            .map(|t| {
                let r = match t.field.as_str() {
                    "metadata.name" => FieldRef::Name,
                    "metadata.namespace" => FieldRef::Namespace,
                    f => FieldRef::Index(
                        info.field_selectors
                            .iter()
                            .position(|x| x == f)
                            .unwrap_or(usize::MAX),
                    ),
                };
                (r, t.value.clone(), t.negated)
            })
            .collect();
        Filter {
            prefix: listwatch_core::options::list_prefix(info, namespace),
            labels,
            fields,
        }
    }

    /// A filter that selects everything.
    pub fn everything() -> Filter {
        Filter {
            prefix: String::new(),
            labels: LabelSelector::default(),
            fields: Vec::new(),
        }
    }

    /// The key prefix (`"ns/"` or `""`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The value field `i` must equal (a non-negated `i=value` term), for an index lookup.
    pub fn field_equals(&self, i: usize) -> Option<&str> {
        self.fields.iter().find_map(|(f, want, negated)| match f {
            FieldRef::Index(j) if *j == i && !*negated => Some(want.as_str()),
            _ => None,
        })
    }

    /// Whether only the prefix restricts (so counts over the key range are exact).
    pub fn selects_all_in_prefix(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether `r` is selected.
    pub fn matches(&self, r: &Record) -> bool {
        if !in_prefix(r.key(), &self.prefix) {
            return false;
        }
        self.fields
            .iter()
            .all(|(f, want, negated)| (r.selected_bytes(f) == want.as_bytes()) != *negated)
            && self.labels.matches(|k| r.label(k))
    }
}

/// What one watcher sees of an event after its filter: kube-apiserver's cacheWatcher rules,
/// where an update that makes an object stop matching is a DELETED and one that makes it
/// start matching is an ADDED.
#[derive(Debug)]
pub struct FilteredEvent<'a> {
    /// Event type as the watcher sees it.
    pub kind: crate::event_log::EventType,
    /// The object to send.
    pub object: &'a Arc<Record>,
    /// Send the object with this RV instead of its own (deletions carry the deletion RV, so
    /// a client resuming from the last event's RV never goes backwards).
    pub stamp_rv: Option<u64>,
}

impl Filter {
    /// Applies this filter to `e`; `None` when the watcher sees nothing.
    pub fn view<'a>(&self, e: &'a crate::event_log::Event) -> Option<FilteredEvent<'a>> {
        use crate::event_log::EventType::*;
        let now = e.kind != Deleted && self.matches(&e.object);
        let before = e.prev.as_ref().is_some_and(|p| self.matches(p));
        let (kind, object, stamp) = match (e.kind, before, now) {
            (Deleted, true, _) => (Deleted, e.prev.as_ref()?, true),
            (Deleted, false, _) => return None,
            (_, true, true) => (Modified, &e.object, false),
            (_, false, true) => (Added, &e.object, false),
            (_, true, false) => (Deleted, e.prev.as_ref()?, true),
            (_, false, false) => return None,
        };
        Some(FilteredEvent {
            kind,
            object,
            stamp_rv: stamp.then_some(e.rv),
        })
    }
}
