//! JSON Web Tokens signed as a service-account or OIDC issuer signs them.

use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// `claims` signed with the private key `private_pem` (EC for ES256, else RSA) by `alg`:
/// a compact JWS, as an issuer hands it out.
pub fn sign(claims: &serde_json::Value, private_pem: &str, alg: Algorithm) -> String {
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(private_pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(private_pem.as_bytes()),
    }
    .expect("signing key");
    jsonwebtoken::encode(&Header::new(alg), claims, &key).expect("sign")
}
