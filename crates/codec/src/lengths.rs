//! Protobuf lengths measured ahead of LISTs (issue 27 item 2): a protobuf LIST states its
//! items' lengths before them, and without a pass ahead of it the first LIST of a storm
//! transcodes its whole collection before its first byte. An app's housekeeping calls
//! [`LengthMeasuring::pass`] (on a blocking thread); readiness waits for the first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use listwatch_store::Store;
use listwatch_store::record::EncodedForm;

use crate::protobuf::measure_lengths;

/// The passes of one app: which stores were measured at which RV in which forms, and
/// whether a first pass with every cache loaded is done. Without it the first protobuf
/// LISTs after readiness measured for themselves, and a storm of 64 right after a
/// 40,000-pod start got its first bytes 0.8 s late (loadtest/README.md). Done once: caches
/// registered later (custom resources, which have no protobuf form) or relisted later are
/// not waited for.
#[derive(Default)]
pub struct LengthMeasuring {
    /// `UNCHECKED`, `PENDING` or `DONE`.
    first_pass: AtomicU8,
    /// Store address → RV and forms last measured: a pass over a measured store only reads
    /// the memos.
    measured: std::sync::Mutex<HashMap<usize, (u64, [bool; 2])>>,
}

impl LengthMeasuring {
    const UNCHECKED: u8 = 0;
    const PENDING: u8 = 1;
    const DONE: u8 = 2;

    /// Passes will be made: readiness waits for the first.
    pub fn expect(&self) {
        self.first_pass.fetch_max(Self::PENDING, Ordering::AcqRel);
    }

    /// `None` when no passes are made, else whether the first is done.
    pub fn first_pass_done(&self) -> Option<bool> {
        match self.first_pass.load(Ordering::Acquire) {
            Self::UNCHECKED => None,
            v => Some(v == Self::DONE),
        }
    }

    /// Measures the protobuf lengths of the records of every one of `stores` whose
    /// protobuf form changed since the last pass. Until the first pass is done every form
    /// is measured; after it only the forms LISTs have asked of each resource since start:
    /// on a write-heavy server (a gateway's front) measuring every new object in both forms
    /// was 10 % of a small create's cost, for LISTs that mostly never come (the first one
    /// measures for itself). `loaded`: every cache was loaded when the pass began, so it
    /// covers what a storm right after readiness lists and counts as the first.
    pub fn pass(&self, stores: &[Arc<Store>], loaded: bool) {
        let every_form = self.first_pass_done() != Some(true);
        let mut measured = self.measured.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::new();
        for s in stores {
            let key = Arc::as_ptr(s) as usize;
            let snap = s.current();
            // Measured again when a form is first LISTed, not only at the next write.
            let forms = [EncodedForm::Object, EncodedForm::Metadata]
                .map(|form| every_form || s.listed_form(form));
            let state = (snap.rv(), forms);
            if measured.get(&key) != Some(&state) {
                measure_lengths(s.info(), &snap, |form| forms[form as usize]);
            }
            next.insert(key, state);
        }
        *measured = next;
        if loaded {
            self.first_pass.store(Self::DONE, Ordering::Release);
        }
    }
}
