//! etcd's authentication for the function: the cluster's token key, and the tokens for `root` it
//! signs itself with that key (or, for members of older bundles, the CA's).

use std::fmt;

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};
use serde::Serialize;

use super::ca::{pki, Ca};
use super::keys::KeyPem;
use crate::error::Error;
use crate::model::Timestamp;

/// etcd's administrator: the user the function's tokens name once authentication is on
/// (membership, snapshots, defragmentation and user management need it).
pub const ROOT_USER: &str = "root";
/// The auth revision a root token carries. etcd refuses a token older than its auth store (a
/// permission changed since it was issued); root's permissions never change, so the function's
/// tokens claim a revision no store reaches (2^53, exact in the JSON number etcd reads).
/// Serialized reads compare the revision for equality: see `EtcdMembers::compacted_up_to`.
pub const ROOT_TOKEN_REVISION: u64 = 1 << 53;
/// A root token's life: one is signed for every request.
const ROOT_TOKEN_SECS: i64 = 300;

/// A fresh key for etcd's JWT tokens (ECDSA P-256, PKCS#8 PEM: etcd 3.4.17+ and 3.5 read it,
/// golang-jwt's `ParseECPrivateKeyFromPEM` falling back to PKCS#8).
pub fn generate_token_key() -> Result<KeyPem, Error> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(pki("token key"))?;
    Ok(KeyPem(key.serialize_pem()))
}

/// The function's credential for etcd's authentication: tokens it signs itself for `root` with
/// the cluster's token key, which members hold too
/// (`ETCD_AUTH_TOKEN=jwt,priv-key=<token.key>,sign-method=ES256`).
///
/// Why tokens and not the certificate's common name: the function speaks etcd's JSON gateway,
/// which does not take the user from a client certificate, and refuses certificates with a
/// common name at all once authentication is on. Signing its own needs no quorum (unlike etcd's
/// Authenticate, a raft write), so a survivor's snapshot can still be taken when the quorum is
/// lost.
///
/// Why members hold the signing key, not only a public key: etcd's leader revokes an expired
/// lease as `root` with a token its own provider signs (`authStore.WithRoot` in
/// `revokeExpiredLeases`); a verify-only provider cannot, the revoke fails with "user name is
/// empty", and leased keys (locks, elections, registrations) never go (etcd-io/etcd#14616).
/// Members also sign the tokens of password users who log in over the gateway, and 3.5.11+
/// answers `/health` as root the same way. The key is the cluster's own, not the CA's: the CA's
/// key never leaves the function's parameters. Members of bundles handed out before the token
/// key (three parts) still verify with the CA's certificate: the CA's key is the second signer,
/// tried where the first is refused as an invalid token.
pub struct RootTokens {
    keys: Vec<jsonwebtoken::EncodingKey>,
}

impl fmt::Debug for RootTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RootTokens(..)")
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    username: &'a str,
    revision: u64,
    exp: i64,
}

impl RootTokens {
    /// How many signers there are (the token key and the CA's, or the CA's alone).
    pub fn signers(&self) -> usize {
        self.keys.len()
    }

    /// A token for `root` from signer `signer` (0: the first), valid `ROOT_TOKEN_SECS` from
    /// `now`.
    pub fn token(&self, signer: usize, now: Timestamp) -> Result<String, Error> {
        let claims = Claims {
            username: ROOT_USER,
            revision: ROOT_TOKEN_REVISION,
            exp: now + ROOT_TOKEN_SECS,
        };
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        let key = &self.keys[signer.min(self.keys.len() - 1)];
        jsonwebtoken::encode(&header, &claims, key).map_err(|e| Error::Pki {
            what: "signing a root token",
            detail: e.to_string(),
        })
    }
}

impl Ca {
    /// The token signers for `root` (see `RootTokens`): the token key first, where there is
    /// one, then the CA's key.
    pub fn root_tokens(&self) -> Result<RootTokens, Error> {
        let der = |pem: &KeyPem, what| {
            KeyPair::from_pem(pem.expose())
                .map(|k| jsonwebtoken::EncodingKey::from_ec_der(&k.serialize_der()))
                .map_err(pki(what))
        };
        let mut keys = Vec::with_capacity(2);
        if let Some(token_key) = &self.token_key {
            keys.push(der(token_key, "reading the token key")?);
        }
        // An adopted CA's key never: no member ever verified tokens with it.
        if !self.imported {
            keys.push(der(&self.key_pem, "reading the CA key")?);
        }
        if keys.is_empty() {
            return Err(Error::Pki {
                what: "root tokens",
                detail: "an adopted CA, and no token key".into(),
            });
        }
        Ok(RootTokens { keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::fixtures::{parse, NOW};
    use x509_parser::prelude::*;

    #[test]
    fn root_tokens_verify_with_the_ca_certificate_and_name_root() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let token = ca.root_tokens().unwrap().token(0, NOW).unwrap();
        // Members of bundles without a token key verify with the CA's certificate (pub-key=ca.crt).
        let der = parse(&ca.cert_pem);
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        let point = x.public_key().subject_public_key.data.to_vec();
        let key = jsonwebtoken::DecodingKey::from_ec_der(&point);
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        v.validate_exp = false;
        v.required_spec_claims.clear();
        let t = jsonwebtoken::decode::<serde_json::Value>(&token, &key, &v).unwrap();
        assert_eq!(t.claims["username"], "root");
        assert_eq!(t.claims["revision"], ROOT_TOKEN_REVISION);
        assert_eq!(t.claims["exp"], NOW + ROOT_TOKEN_SECS);
        // Another CA's certificate does not verify it.
        let other = Ca::generate("prod", NOW).unwrap();
        let der = parse(&other.cert_pem);
        let (_, o) = X509Certificate::from_der(&der).unwrap();
        let key = jsonwebtoken::DecodingKey::from_ec_der(&o.public_key().subject_public_key.data);
        assert!(jsonwebtoken::decode::<serde_json::Value>(&token, &key, &v).is_err());
        assert_eq!(format!("{:?}", ca.root_tokens().unwrap()), "RootTokens(..)");
    }

    /// The public point of a PKCS#8 P-256 key, as a JWT verifier takes it.
    fn public_point(key: &KeyPem) -> Vec<u8> {
        KeyPair::from_pem(key.expose())
            .unwrap()
            .public_key_raw()
            .to_vec()
    }

    fn verifies(token: &str, point: &[u8]) -> bool {
        let key = jsonwebtoken::DecodingKey::from_ec_der(point);
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        v.required_spec_claims.clear();
        jsonwebtoken::decode::<serde_json::Value>(token, &key, &v).is_ok()
    }

    #[test]
    fn with_a_token_key_members_get_it_in_their_bundle_and_tokens_are_signed_with_it_first() {
        let mut ca = Ca::generate("prod", NOW).unwrap();
        let token_key = generate_token_key().unwrap();
        assert!(token_key
            .expose()
            .starts_with("-----BEGIN PRIVATE KEY-----"));
        ca.token_key = Some(token_key.clone());
        let tokens = ca.root_tokens().unwrap();
        assert_eq!(tokens.signers(), 2);
        let now = unix_now();
        let first = tokens.token(0, now).unwrap();
        assert!(verifies(&first, &public_point(&token_key)));
        assert!(!verifies(&first, &public_point(&ca.key_pem)));
        // The second signer is the CA's key, for members of older bundles.
        let second = tokens.token(1, now).unwrap();
        assert!(verifies(&second, &public_point(&ca.key_pem)));
        // The bundle: CA certificate, member certificate, member key, token key.
        let m = ca
            .issue_member("i-1", "10.0.0.1", &[], 86_400, NOW)
            .unwrap();
        let bundle = m.bundle(&ca);
        let parts: Vec<&str> = bundle
            .expose()
            .lines()
            .filter(|l| l.starts_with("-----BEGIN "))
            .collect();
        assert_eq!(
            parts,
            [
                "-----BEGIN CERTIFICATE-----",
                "-----BEGIN CERTIFICATE-----",
                "-----BEGIN PRIVATE KEY-----",
                "-----BEGIN PRIVATE KEY-----"
            ]
        );
        assert!(bundle.expose().ends_with(token_key.expose()));
        // The token key is kept apart: never in the CA's own record.
        let kept = serde_json::to_string(&ca).unwrap();
        assert!(!kept.contains(token_key.expose().lines().nth(1).unwrap()));
        let back: Ca = serde_json::from_str(&kept).unwrap();
        assert_eq!(back.token_key, None);
        // Without a token key: the three parts members had before.
        ca.token_key = None;
        assert_eq!(m.bundle(&ca).expose().matches("-----BEGIN ").count(), 3);
    }

    fn unix_now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }
}
