//! Replays every committed fuzz input (seed corpora and crash reproducers under `fuzz/`)
//! through the fuzz targets' own checks, on stable, in CI.

#[allow(dead_code)]
#[path = "../../../fuzz/checks.rs"]
mod checks;

fn replay(target: &str, check: fn(&[u8])) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            let data = std::fs::read(e.path()).expect("read input");
            check(&data);
            n += 1;
        }
    }
    assert!(n > 0, "no committed inputs for {target}");
}

/// One test per fuzz target, named after it, replaying that target's committed inputs
/// through its check.
macro_rules! corpus_tests {
    ($($target:ident),* $(,)?) => {$(
        #[test]
        fn $target() {
            replay(stringify!($target), checks::$target);
        }
    )*};
}

corpus_tests!(
    list_options,
    label_selector,
    field_selector,
    continue_token,
    ingest
);
