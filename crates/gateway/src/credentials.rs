//! listwatch's own credentials for calling an apiserver, read as client-go reads them and
//! kept current as they rotate: a bearer token written in a kubeconfig, or a token file
//! (a projected service-account token the kubelet replaces before it expires, a `tokenFile`
//! in a kubeconfig) read again whenever it changes; and the in-cluster configuration a pod
//! is given (`KUBERNETES_SERVICE_HOST`/`_PORT`, the mounted token and CA).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::HeaderValue;

use crate::{GatewayError, Kubeconfig};

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

/// How often a token file is looked at (one `stat`, on a request that needs the token).
const FILE_CHECK: Duration = Duration::from_secs(1);

/// The `Authorization: Bearer …` header for a [`TokenSource`], current for each request.
#[derive(Clone, Debug)]
pub struct Bearer(Arc<BearerInner>);

#[derive(Debug)]
enum BearerInner {
    Fixed(HeaderValue),
    File {
        path: PathBuf,
        current: parking_lot::Mutex<FileToken>,
    },
}

#[derive(Debug)]
struct FileToken {
    header: HeaderValue,
    modified: Option<SystemTime>,
    checked: Instant,
}

impl Bearer {
    /// The header for `source`; a token file must be readable now.
    pub fn new(source: &TokenSource) -> Result<Bearer, GatewayError> {
        Ok(Bearer(Arc::new(match source {
            TokenSource::Value(t) => BearerInner::Fixed(header(t)?),
            TokenSource::File(path) => {
                let (header, modified) = read_token_file(path)?;
                BearerInner::File {
                    path: path.clone(),
                    current: parking_lot::Mutex::new(FileToken {
                        header,
                        modified,
                        checked: Instant::now(),
                    }),
                }
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
            BearerInner::File { path, current } => {
                let mut c = current.lock();
                if c.checked.elapsed() >= FILE_CHECK {
                    c.checked = Instant::now();
                    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                    if modified != c.modified {
                        match read_token_file(path) {
                            Ok((h, m)) => {
                                c.header = h;
                                c.modified = m;
                                tracing::info!(file = %path.display(), "bearer token read again");
                            }
                            Err(e) => tracing::warn!(error = %e, "token file not read again"),
                        }
                    }
                }
                c.header.clone()
            }
        }
    }
}

fn header(token: &str) -> Result<HeaderValue, GatewayError> {
    HeaderValue::try_from(format!("Bearer {}", token.trim()))
        .map_err(|_| GatewayError::Config("token is not a header value".into()))
}

fn read_token_file(path: &Path) -> Result<(HeaderValue, Option<SystemTime>), GatewayError> {
    let bad = |why: String| GatewayError::Config(format!("token file {}: {why}", path.display()));
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(bad("empty".into()));
    }
    Ok((header(&text).map_err(|e| bad(e.to_string()))?, modified))
}

/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The in-cluster apiserver as client-go's `rest.InClusterConfig` finds it: the URL from
/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, the CA and the token (kept
/// current as the kubelet rotates it) from `dir`. `None` outside a pod (no such
/// environment); an error names what is missing inside one.
pub fn in_cluster(dir: &Path) -> Result<Option<(String, Kubeconfig)>, GatewayError> {
    let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Ok(None);
    };
    if host.is_empty() || port.is_empty() {
        return Ok(None);
    }
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let ca_file = dir.join("ca.crt");
    let ca_pem = std::fs::read(&ca_file)
        .map_err(|e| GatewayError::Config(format!("in-cluster CA {}: {e}", ca_file.display())))?;
    let token = TokenSource::File(dir.join("token"));
    // Read now, so a pod without its token is told so at start-up.
    Bearer::new(&token)?;
    let url = format!("https://{host}:{port}");
    Ok(Some((
        url.clone(),
        Kubeconfig {
            server: Some(url),
            ca_pem: Some(ca_pem),
            client_cert: None,
            token: Some(token),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::thread::sleep(FILE_CHECK + Duration::from_millis(50));
        assert_eq!(bearer.header(), "Bearer second");
        // Gone for a moment: the last token stays.
        std::fs::remove_file(&path).expect("remove");
        std::thread::sleep(FILE_CHECK + Duration::from_millis(50));
        assert_eq!(bearer.header(), "Bearer second");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
