//! Certificates made with the `openssl` command, as an operator makes them for a cluster:
//! a CA of a test's own, and certificates signed by a CA (the cluster's, or one of these).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl ARGS`, panicking with its stderr when it fails.
pub fn openssl(args: &[&OsStr]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl");
    crate::process::stdout_of_success(&format!("openssl {args:?}"), &out);
}

/// A self-signed CA `dir/name.pem` with its key `dir/name.key`.
pub fn self_signed_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    openssl(&[
        "req".as_ref(),
        "-x509".as_ref(),
        "-newkey".as_ref(),
        "rsa:2048".as_ref(),
        "-nodes".as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-subj".as_ref(),
        format!("/CN={name}").as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        cert.as_os_str(),
    ]);
    (cert, key)
}

/// A certificate `dir/file.pem` (key `dir/file.key`, RSA 2048, two days) for `subject`
/// (`/O=group/CN=user`), with the X.509 v3 extensions `extensions` (an openssl extfile:
/// `extendedKeyUsage=clientAuth`, say), signed by the CA `(cert, key)`.
pub fn signed_cert(
    dir: &Path,
    file: &str,
    subject: &str,
    extensions: &str,
    (ca_cert, ca_key): (&Path, &Path),
) -> (PathBuf, PathBuf) {
    let (cert, key, csr, ext) = (
        dir.join(format!("{file}.pem")),
        dir.join(format!("{file}.key")),
        dir.join(format!("{file}.csr")),
        dir.join(format!("{file}.ext")),
    );
    std::fs::write(&ext, extensions).expect("ext file");
    openssl(&[
        "req".as_ref(),
        "-newkey".as_ref(),
        "rsa:2048".as_ref(),
        "-nodes".as_ref(),
        "-subj".as_ref(),
        subject.as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
    ]);
    openssl(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-CAcreateserial".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-CA".as_ref(),
        ca_cert.as_os_str(),
        "-CAkey".as_ref(),
        ca_key.as_os_str(),
        "-out".as_ref(),
        cert.as_os_str(),
        "-extfile".as_ref(),
        ext.as_os_str(),
    ]);
    (cert, key)
}
