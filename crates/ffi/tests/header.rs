//! The committed C header is what cbindgen makes of the exported functions now: a changed
//! signature without a regenerated header fails here (and so in CI).

use std::path::Path;

#[test]
fn committed_header_matches_the_exported_functions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads src/")
        .write(&mut generated);
    let path = dir.join("include/listwatch.h");
    if std::env::var_os("LISTWATCH_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write header");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date with src/: run LISTWATCH_BLESS=1 cargo test -p listwatch-ffi --test header and commit it",
        path.display()
    );
}
