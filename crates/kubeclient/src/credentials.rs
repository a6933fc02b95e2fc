//! listwatch's own bearer token for calling an apiserver, read as client-go reads it and
//! kept current as it rotates: a token written in a kubeconfig, or a token file (a
//! projected service-account token the kubelet replaces before it expires, a `tokenFile`
//! in a kubeconfig) read again whenever it changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::HeaderValue;

use crate::Error;
use crate::tls::Reloading;

/// Where a bearer token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A token given once (a kubeconfig's `token`).
    Value(String),
    /// A file holding the token, read again when it changes (`tokenFile`, the in-cluster
    /// service-account token).
    File(PathBuf),
}

impl From<&str> for TokenSource {
    fn from(token: &str) -> Self {
        TokenSource::Value(token.to_string())
    }
}

impl From<String> for TokenSource {
    fn from(token: String) -> Self {
        TokenSource::Value(token)
    }
}

/// The `Authorization: Bearer …` header for a [`TokenSource`], current for each request.
#[derive(Clone, Debug)]
pub struct Bearer(Arc<BearerInner>);

#[derive(Debug)]
enum BearerInner {
    Fixed(HeaderValue),
    /// Looked at (one `stat`) at most every [`crate::tls::RELOAD_CHECK`], on a request that needs the
    /// token.
    File(Reloading<HeaderValue, Error>),
}

impl Bearer {
    /// The header for `source`; a token file must be readable now.
    pub fn new(source: &TokenSource) -> Result<Bearer, Error> {
        Ok(Bearer(Arc::new(match source {
            TokenSource::Value(t) => BearerInner::Fixed(header(t)?),
            TokenSource::File(path) => {
                BearerInner::File(Reloading::new(&[path], |f| read_token_file(f[0]))?)
            }
        })))
    }

    /// The header to send now: a token file is read again when a second has passed since
    /// the last look and it changed. A file that cannot be read then keeps the token last
    /// read (logged): the kubelet writes the new token atomically, so this is a passing
    /// state, and the upstream says 401 if the old token is no longer good.
    pub fn header(&self) -> HeaderValue {
        match &*self.0 {
            BearerInner::Fixed(h) => h.clone(),
            BearerInner::File(file) => file.current(),
        }
    }
}

fn header(token: &str) -> Result<HeaderValue, Error> {
    HeaderValue::try_from(format!("Bearer {}", token.trim()))
        .map_err(|_| Error::Config("token is not a header value".into()))
}

fn read_token_file(path: &Path) -> Result<HeaderValue, Error> {
    let bad = |why: String| Error::Config(format!("token file {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(bad("empty".into()));
    }
    header(&text).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::RELOAD_CHECK;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("lw-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("token");
        std::fs::write(&path, "first\n").expect("write");
        let bearer = Bearer::new(&TokenSource::File(path.clone())).expect("bearer");
        assert_eq!(bearer.header(), "Bearer first");
        // Replaced as the kubelet does: a new file renamed over the old one.
        let tmp = dir.join("token.new");
        std::fs::write(&tmp, "second").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_modified(SystemTime::now() + Duration::from_secs(5))
            .expect("mtime");
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(50));
        assert_eq!(bearer.header(), "Bearer second");
        // Gone for a moment: the last token stays.
        std::fs::remove_file(&path).expect("remove");
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(50));
        assert_eq!(bearer.header(), "Bearer second");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
