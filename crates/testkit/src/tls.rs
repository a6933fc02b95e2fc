//! A throwaway PKI and an HTTPS client (rustls, ALPN h2 or http/1.1, optional client
//! certificate) for the security tests.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A CA that signs server and client certificates.
pub struct Ca {
    /// Its certificate, PEM.
    pub cert_pem: String,
    /// Its certificate, DER.
    pub cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, PEM and DER.
pub struct Leaf {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The key, PEM.
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: CertificateDer<'static>,
    /// The key, DER (PKCS #8).
    pub key_der: Vec<u8>,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("ca cert");
        Ca {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Leaf {
        let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("params");
        self.sign(params)
    }

    /// A client certificate: CN = user, one O per group.
    pub fn client(&self, user: &str, groups: &[&str]) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}

/// Writes `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// A response read whole.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: String,
    /// The HTTP version ALPN chose.
    pub version: http::Version,
}

/// An HTTPS connection trusting `ca`, offering `alpn`, optionally with a client cert.
pub async fn connect(
    addr: std::net::SocketAddr,
    ca: &Ca,
    alpn: &[&str],
    client: Option<&Leaf>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    connect_stream(tcp, ca, alpn, client).await
}

/// [`connect`] over a TCP connection already open (a test can wait before the handshake).
pub async fn connect_stream(
    tcp: tokio::net::TcpStream,
    ca: &Ca,
    alpn: &[&str],
    client: Option<&Leaf>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der.clone()).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = match client {
        Some(l) => builder
            .with_client_auth_cert(
                vec![l.cert_der.clone()],
                PrivateKeyDer::try_from(l.key_der.clone()).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let mut s = connector.connect(name, tcp).await?;
    // TLS 1.3 reports a refused client certificate only on the first read; surface it now.
    use tokio::io::AsyncWriteExt;
    s.flush().await?;
    Ok(s)
}

/// An HTTPS client: whom it trusts, what it offers by ALPN, its certificate.
pub struct Https<'a> {
    /// The server's address.
    pub addr: std::net::SocketAddr,
    /// The CA its certificate is checked against.
    pub ca: &'a Ca,
    /// The protocols offered by ALPN.
    pub alpn: &'a [&'a str],
    /// The client certificate, if any.
    pub cert: Option<&'a Leaf>,
}

impl Https<'_> {
    /// One request on a fresh connection (HTTP/2 when negotiated, else HTTP/1.1).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Result<Reply, String> {
        request(self.addr, self, method, path, token, body).await
    }
}

async fn request(
    addr: std::net::SocketAddr,
    c: &Https<'_>,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<Reply, String> {
    let s = connect(addr, c.ca, c.alpn, c.cert)
        .await
        .map_err(|e| e.to_string())?;
    let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1:{}{path}", addr.port()))
        .header("content-type", "application/json");
    if !h2 {
        req = req.header("host", format!("127.0.0.1:{}", addr.port()));
    }
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(match body {
            Some(b) => Full::new(Bytes::from(b.to_string())).boxed(),
            None => Empty::<Bytes>::new().map_err(|e| match e {}).boxed(),
        })
        .map_err(|e| e.to_string())?;
    let io = TokioIo::new(s);
    let resp = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    };
    let status = resp.status().as_u16();
    let version = resp.version();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Reply {
        status,
        headers,
        version,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}
