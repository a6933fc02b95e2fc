//! Connections to the target: plain TCP for `http://`, rustls for `https://` (trusting
//! `--ca-file`, the system-less default of no roots, or nothing at all with
//! `--insecure-skip-tls-verify`).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream to the server, plain or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection to the server.
pub type Conn = Box<dyn Stream>;

static TLS: OnceLock<Option<(tokio_rustls::TlsConnector, ServerName<'static>)>> = OnceLock::new();

/// The same TLS set-up offering ALPN `h2`, for HTTP/2 connections: Go's server
/// (kube-apiserver) speaks HTTP/2 over TLS only when ALPN chose it.
static TLS_H2: OnceLock<Option<(tokio_rustls::TlsConnector, ServerName<'static>)>> =
    OnceLock::new();

static TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// The `Authorization` value every request sends, if a token was given.
pub fn bearer() -> Option<String> {
    TOKEN.get()?.as_ref().map(|t| format!("Bearer {t}"))
}

/// Where the target is and how to reach it: the command line's connection flags.
#[derive(clap::Args)]
pub struct Target {
    /// Base URL (http://host:port) of the apiserver.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Bearer token, if the server wants one.
    #[arg(long)]
    pub token: Option<String>,
    /// CA bundle (PEM) to trust for an https:// URL.
    #[arg(long)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Accept any server certificate (https:// URLs).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

/// Sets up TLS for an `https://` target and the bearer token; returns `host:port`.
pub fn init(target: &Target) -> Result<String, String> {
    let (url, ca_file, insecure) = (
        target.url.as_str(),
        target.ca_file.as_deref(),
        target.insecure_skip_tls_verify,
    );
    let _ = TOKEN.set(target.token.clone());
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{url}: want http:// or https://"));
    };
    let host = rest.trim_end_matches('/').to_string();
    if !tls {
        let _ = TLS.set(None);
        let _ = TLS_H2.set(None);
        return Ok(host);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(c.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let name = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
    let name = ServerName::try_from(name.trim_matches(['[', ']']).to_string())
        .map_err(|e| e.to_string())?;
    let mut h2 = config.clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    let _ = TLS_H2.set(Some((
        tokio_rustls::TlsConnector::from(Arc::new(h2)),
        name.clone(),
    )));
    let _ = TLS.set(Some((
        tokio_rustls::TlsConnector::from(Arc::new(config)),
        name,
    )));
    Ok(host)
}

/// Opens a connection (TLS when the target is `https://`).
pub async fn connect(host: &str) -> Result<Conn, String> {
    Ok(connect_watched(host, false).await?.0)
}

/// Opens a connection for HTTP/2 (TLS with ALPN `h2` when the target is `https://`).
pub async fn connect_h2(host: &str) -> Result<Conn, String> {
    let tcp = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    connect_over(tcp, TLS_H2.get().and_then(Option::as_ref)).await
}

/// [`connect`], and, when `watch_arrival` and the connection is plain TCP, an [`Arrival`]
/// that tells when its first bytes from the server reached the socket.
pub async fn connect_watched(
    host: &str,
    watch_arrival: bool,
) -> Result<(Conn, Option<Arrival>), String> {
    let tcp = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let tls = TLS.get().and_then(Option::as_ref);
    // Over TLS the first bytes after the handshake may be the server's session tickets, not
    // its response.
    if let (true, None) = (watch_arrival, tls) {
        let arrival = Arrival::watch(&tcp)?;
        let stamped = FirstWrite {
            inner: tcp,
            at: arrival.written.clone(),
        };
        return Ok((Box::new(stamped), Some(arrival)));
    }
    Ok((connect_over(tcp, tls).await?, None))
}

/// When a connection's first bytes went to the kernel and when the server's first bytes
/// reached its socket, the latter seen by a thread blocked in poll(2) on it: a busy harness
/// (64 clients reading 250 MB each on 2 cores) writes its requests and reads its sockets
/// late, and the time between the two leaves that delay out.
pub struct Arrival {
    written: Arc<OnceLock<std::time::Instant>>,
    arrived: std::sync::mpsc::Receiver<std::time::Instant>,
}

/// How long an [`Arrival`] thread waits for the first bytes before it gives up, seconds.
const ARRIVAL_WAIT_S: i64 = 120;

impl Arrival {
    fn watch(tcp: &TcpStream) -> Result<Self, String> {
        use std::os::fd::AsFd;
        let fd = tcp
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("dup: {e}"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("arrival".into())
            .spawn(move || {
                use rustix::event::{PollFd, PollFlags, Timespec, poll};
                let wait = Timespec {
                    tv_sec: ARRIVAL_WAIT_S,
                    tv_nsec: 0,
                };
                loop {
                    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                    match poll(&mut fds, Some(&wait)) {
                        Ok(0) => return,
                        Ok(_) => {
                            let _ = tx.send(std::time::Instant::now());
                            return;
                        }
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return,
                    }
                }
            })
            .map_err(|e| format!("arrival thread: {e}"))?;
        Ok(Arrival {
            written: Arc::default(),
            arrived: rx,
        })
    }

    /// From the first bytes written to the first bytes arrived, once both have happened
    /// (waits up to a second for the thread to report).
    pub fn round_trip(&self) -> Option<std::time::Duration> {
        let written = *self.written.get()?;
        let arrived = self
            .arrived
            .recv_timeout(std::time::Duration::from_secs(1))
            .ok()?;
        Some(arrived.saturating_duration_since(written))
    }
}

/// A connection that notes when its first bytes were written.
struct FirstWrite {
    inner: TcpStream,
    at: Arc<OnceLock<std::time::Instant>>,
}

impl FirstWrite {
    /// Notes the moment of the first write that took bytes.
    fn note(&self, written: &std::task::Poll<std::io::Result<usize>>) {
        if let std::task::Poll::Ready(Ok(n)) = written
            && *n > 0
        {
            let _ = self.at.set(std::time::Instant::now());
        }
    }
}

impl AsyncRead for FirstWrite {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FirstWrite {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note(&r);
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `tcp`, wrapped in TLS when `tls` is set.
async fn connect_over(
    tcp: TcpStream,
    tls: Option<&(tokio_rustls::TlsConnector, ServerName<'static>)>,
) -> Result<Conn, String> {
    match tls {
        None => Ok(Box::new(tcp)),
        Some((connector, name)) => Ok(Box::new(
            connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?,
        )),
    }
}

/// The trait's signature checks, each handed to rustls's function of the same name with the
/// provider's algorithms: skipping verification skips the certificate, not the handshake's
/// signatures.
macro_rules! signature_checks {
    ($($check:ident),*) => {$(
        fn $check(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::$check(message, cert, dss, &self.0.signature_verification_algorithms)
        }
    )*};
}

/// `--insecure-skip-tls-verify`: accepts any certificate (signatures still checked).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    signature_checks!(verify_tls12_signature, verify_tls13_signature);

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
