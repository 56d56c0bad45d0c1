//! The cluster's certificates: a CA the function keeps, a certificate for each member issued when
//! it joins, and client certificates (the function's own, short-lived, and those an operator
//! issues for programs). ECDSA P-256 throughout, through `rcgen`: no ASN.1 by hand.
//!
//! Pure apart from key generation: the time is the caller's. Private keys are `KeyPem`, whose
//! `Debug` prints nothing of the key, so a key never reaches a log line or an error message.
//!
//! One room for each part, all re-exported here (`pki::X` is the path everywhere): keys and
//! passwords that never print (`keys.rs`); the CA, what it issues and to whom (`ca.rs`); an
//! adopted cluster's CA, imported and checked (`import.rs`); the token key and the root tokens
//! signed with it (`tokens.rs`).

mod ca;
mod import;
mod keys;
mod tokens;

pub use ca::{san, Ca, Issued, CA_DAYS, FUNCTION_CERT_SECS};
pub use keys::{KeyPem, Password};
pub use tokens::{generate_token_key, RootTokens, ROOT_TOKEN_REVISION, ROOT_USER};

/// What the tests of every room share: a time to issue at, and a PEM certificate's DER.
#[cfg(test)]
mod fixtures {
    use crate::model::Timestamp;

    pub(super) const NOW: Timestamp = 1_800_000_000;

    pub(super) fn parse(pem: &str) -> Vec<u8> {
        let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        p.contents
    }
}
