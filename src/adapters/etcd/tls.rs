//! What the function presents to etcd and trusts.

use crate::config::TlsFiles;
use crate::error::Error;

/// What the function presents to etcd and trusts: PEM bytes, from files (ETCD_*_FILE) or from
/// the certificate it issued itself (TLS=managed).
pub struct ClientTls {
    pub ca_pem: Vec<u8>,
    /// Certificate then key.
    pub identity_pem: crate::pki::KeyPem,
}

impl ClientTls {
    pub fn from_files(tls: &TlsFiles) -> Result<Self, Error> {
        let read = |var: &str, path: &str| {
            std::fs::read(path).map_err(|e| Error::Config {
                var: var.into(),
                value: path.into(),
                reason: format!("cannot be read: {e}"),
            })
        };
        let text = |var: &str, path: &str| {
            String::from_utf8(read(var, path)?).map_err(|_| Error::Config {
                var: var.into(),
                value: path.into(),
                reason: "is not PEM text".into(),
            })
        };
        Ok(Self {
            ca_pem: read("ETCD_CA_FILE", &tls.ca)?,
            identity_pem: crate::pki::KeyPem::from(
                text("ETCD_CERT_FILE", &tls.cert)? + &text("ETCD_KEY_FILE", &tls.key)?,
            ),
        })
    }
}

/// The function's own client identity for etcd, from its CA: no common name (it is `root`
/// through tokens), valid a day from `now`.
pub fn own_identity(ca: &crate::pki::Ca, now: i64) -> Result<ClientTls, Error> {
    let issued = ca.issue_function(crate::pki::FUNCTION_CERT_SECS, now)?;
    Ok(ClientTls {
        ca_pem: ca.cert_pem.clone().into_bytes(),
        identity_pem: format!("{}{}", issued.cert_pem, issued.key_pem.expose()).into(),
    })
}
