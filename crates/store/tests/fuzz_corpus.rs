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

#[test]
fn list_options_corpus() {
    replay("list_options", checks::list_options);
}

#[test]
fn label_selector_corpus() {
    replay("label_selector", checks::label_selector);
}

#[test]
fn field_selector_corpus() {
    replay("field_selector", checks::field_selector);
}

#[test]
fn continue_token_corpus() {
    replay("continue_token", checks::continue_token);
}

#[test]
fn ingest_corpus() {
    replay("ingest", checks::ingest);
}
