//! Records the commit the binary is built from (`listwatch --version`, `/version`'s
//! `gitCommit`) as `LISTWATCH_GIT_COMMIT` (uncommitted changes are not marked: watching the
//! index for them would rebuild the binary at every `git status`). Built outside a git checkout (a source archive, an image build without
//! `.git`) it is empty, or what `LISTWATCH_GIT_COMMIT` says in the environment.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=LISTWATCH_GIT_COMMIT");
    if let Ok(given) = std::env::var("LISTWATCH_GIT_COMMIT") {
        println!("cargo:rustc-env=LISTWATCH_GIT_COMMIT={given}");
        return;
    }
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        println!("cargo:rustc-env=LISTWATCH_GIT_COMMIT=");
        return;
    };
    // Run again when HEAD moves (a commit, a checkout, refs packed).
    // (Only files that exist: cargo runs a script again every time for a missing one.)
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(p) = git(&["rev-parse", "--git-path", path])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=LISTWATCH_GIT_COMMIT={commit}");
}
