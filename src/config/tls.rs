//! TLS: the client files the function is given (ETCD_CA_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE), or
//! TLS=managed, the function's own CA and how it issues member certificates.

use super::env::{bad, Env};
use super::vars::*;
use crate::error::Error;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TlsFiles {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl TlsFiles {
    /// All three files or none.
    pub(super) fn parse(env: &Env) -> Result<Option<Self>, Error> {
        match (
            env.get(&ETCD_CA_FILE),
            env.get(&ETCD_CERT_FILE),
            env.get(&ETCD_KEY_FILE),
        ) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca, cert, key })),
            (ca, cert, _) => {
                let missing = if ca.is_none() {
                    ETCD_CA_FILE
                } else if cert.is_none() {
                    ETCD_CERT_FILE
                } else {
                    ETCD_KEY_FILE
                };
                Err(bad(
                    missing.name,
                    "",
                    "is required when any of ETCD_CA_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE is set",
                ))
            }
        }
    }
}

/// TLS=managed: how member certificates are issued and their keys kept.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Pki {
    /// A member certificate's life: MEMBER_CERT_DAYS (or, in tests, MEMBER_CERT_SECS).
    pub member_cert_secs: i64,
    /// Further names in every member's certificate (the load balancer's DNS name).
    pub extra_sans: Vec<String>,
    /// The KMS key of the SecureStrings (CA, member keys); unset: the account's `aws/ssm` key.
    pub kms_key_id: Option<String>,
}

impl Pki {
    /// TLS=managed; `files`: whether TLS files were given too (they must not be).
    pub(super) fn parse(env: &Env, files: bool) -> Result<Option<Self>, Error> {
        match env.get(&TLS).as_deref().unwrap_or(TLS.default) {
            "off" => return Ok(None),
            "managed" => {}
            v => return Err(bad(TLS.name, v, "must be 'managed' or 'off'")),
        }
        if files {
            return Err(bad(
                TLS.name,
                "managed",
                "issues the function's own certificate: leave ETCD_CA_FILE, ETCD_CERT_FILE and \
                 ETCD_KEY_FILE unset",
            ));
        }
        for var in [ETCD_PEER_SCHEME, ETCD_CLIENT_SCHEME] {
            if let Some(v) = env.get(&var).filter(|v| v != "https") {
                return Err(bad(
                    var.name,
                    &v,
                    "must be https (or unset) with TLS=managed",
                ));
            }
        }
        let extra_sans: Vec<String> = env
            .get(&MEMBER_CERT_EXTRA_SANS)
            .unwrap_or_default()
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        for n in &extra_sans {
            let ok = n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
            if !ok || crate::pki::san(n).is_err() {
                return Err(bad(
                    MEMBER_CERT_EXTRA_SANS.name,
                    n,
                    "must be IP addresses or DNS names, comma-separated",
                ));
            }
        }
        let member_cert_secs = match env.get(&MEMBER_CERT_SECS) {
            Some(_) => env.number(&MEMBER_CERT_SECS, 60, 86_400)? as i64,
            None => env.number(&MEMBER_CERT_DAYS, 1, 3650)? as i64 * 86_400,
        };
        Ok(Some(Self {
            member_cert_secs,
            extra_sans,
            kms_key_id: env.get(&PKI_KMS_KEY_ID),
        }))
    }
}
