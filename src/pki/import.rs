//! An adopted cluster's CA (docs/adopting.md), imported as the operator has it: refused, naming
//! what is wrong, unless members would trust what it issues.

use rcgen::{KeyPair, PublicKeyData};

use super::ca::Ca;
use super::keys::KeyPem;
use crate::error::Error;
use crate::model::Timestamp;

impl Ca {
    /// An adopted cluster's CA (docs/adopting.md): its certificate and key as the operator has
    /// them, so that the members this stack adds present certificates the old members trust,
    /// and trust theirs. Refused, naming what is wrong: not PEM, not a CA, expired at `now`, a
    /// key that is not PKCS#8 or not the certificate's. Nothing of the key reaches an error.
    pub fn import(cert_pem: &str, key_pem: KeyPem, now: Timestamp) -> Result<Ca, Error> {
        let bad = |detail: String| Error::Pki {
            what: "importing the cluster's CA",
            detail,
        };
        if cert_pem.matches("-----BEGIN CERTIFICATE-----").count() != 1 {
            return Err(bad(
                "give the CA's certificate alone: one PEM CERTIFICATE block".into(),
            ));
        }
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|e| bad(format!("the certificate is not PEM: {e}")))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| bad(format!("the certificate cannot be read: {e}")))?;
        let is_ca = cert
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|b| b.value.ca);
        if !is_ca {
            return Err(bad(format!(
                "{} is not a CA certificate (no basicConstraints CA:TRUE)",
                cert.subject()
            )));
        }
        let not_after = cert.validity().not_after.timestamp();
        if not_after <= now {
            return Err(bad(format!("{} has expired", cert.subject())));
        }
        if cert.issuer() != cert.subject() {
            return Err(bad(format!(
                "{} is issued by {}: import the CA the members trust (self-signed), not an \
                 intermediate",
                cert.subject(),
                cert.issuer()
            )));
        }
        // PKCS#8 alone: rcgen reads SEC1 and PKCS#1 keys too, but keeps their form, which
        // nothing downstream should have to tell apart.
        let pkcs8 = key_pem
            .expose()
            .trim_start()
            .starts_with("-----BEGIN PRIVATE KEY-----");
        let key =
            KeyPair::from_pem(key_pem.expose())
                .ok()
                .filter(|_| pkcs8)
                .ok_or_else(|| {
                    bad("the key is not a PKCS#8 PEM key (BEGIN PRIVATE KEY) of ECDSA P-256/P-384, \
                     Ed25519 or RSA (convert one: openssl pkcs8 -topk8 -nocrypt -in ca.key)"
                    .into())
                })?;
        if key.subject_public_key_info() != cert.public_key().raw {
            return Err(bad(format!(
                "the key is not the key of {} (another certificate's?)",
                cert.subject()
            )));
        }
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map_or_else(|| cert.subject().to_string(), str::to_string);
        let ca = Ca {
            common_name,
            cert_pem: format!("{}\n", cert_pem.trim()),
            key_pem,
            not_after,
            token_key: None,
            imported: true,
        };
        ca.issues_as(&cert, now)?;
        Ok(ca)
    }

    /// What members will check, byte for byte (Go's verifier finds a parent by its raw
    /// subject): a certificate issued now names `cert`'s subject exactly, and verifies.
    fn issues_as(
        &self,
        cert: &x509_parser::certificate::X509Certificate,
        now: Timestamp,
    ) -> Result<(), Error> {
        let bad = |detail: String| Error::Pki {
            what: "importing the cluster's CA",
            detail,
        };
        let probe = self.issue_function(60, now)?;
        let (_, probe_pem) = x509_parser::pem::parse_x509_pem(probe.cert_pem.as_bytes())
            .map_err(|e| bad(format!("a test certificate is not PEM: {e}")))?;
        let issued = probe_pem
            .parse_x509()
            .map_err(|e| bad(format!("a test certificate cannot be read: {e}")))?;
        if issued.issuer().as_raw() != cert.subject().as_raw()
            || issued.verify_signature(Some(cert.public_key())).is_err()
        {
            return Err(bad(format!(
                "certificates issued from {} would not name its subject exactly (repeated or \
                 multi-valued name parts): members would not find their issuer",
                cert.subject()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::ca::params;
    use crate::pki::fixtures::{parse, NOW};
    use crate::pki::generate_token_key;
    use rcgen::{DnType, IsCa, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256};
    use x509_parser::prelude::*;

    /// A CA as a team's tooling makes one: a subject of several parts, another key type.
    fn foreign_ca(alg: &'static rcgen::SignatureAlgorithm, ca: bool) -> (String, KeyPem) {
        let key = KeyPair::generate_for(alg).unwrap();
        let mut p = params("outside etcd CA", NOW - 86_400, NOW + 365 * 86_400).unwrap();
        p.distinguished_name
            .push(DnType::OrganizationName, "Outside Team");
        p.distinguished_name
            .push(DnType::OrganizationalUnitName, "platform");
        if ca {
            p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        }
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), KeyPem(key.serialize_pem()))
    }

    #[test]
    fn an_adopted_ca_issues_certificates_naming_it_exactly_and_a_bad_one_is_refused() {
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
        ] {
            let (cert, key) = foreign_ca(alg, true);
            let ca = Ca::import(&cert, key, NOW).unwrap();
            assert_eq!(ca.common_name, "outside etcd CA");
            let m = ca
                .issue_member("i-0abc", "10.0.1.7", &[], 86_400, NOW)
                .unwrap();
            let (ca_der, der) = (parse(&ca.cert_pem), parse(&m.cert_pem));
            let (_, ca_x) = X509Certificate::from_der(&ca_der).unwrap();
            let (_, x) = X509Certificate::from_der(&der).unwrap();
            x.verify_signature(Some(ca_x.public_key())).unwrap();
            assert_eq!(x.issuer(), ca_x.subject());
            assert!(x.issuer().to_string().contains("O=Outside Team"));
            // The function's tokens are signed with the token key alone: an adopted CA's key
            // never signs them.
            let with_token_key = Ca {
                token_key: Some(generate_token_key().unwrap()),
                ..ca.clone()
            };
            assert_eq!(with_token_key.root_tokens().unwrap().signers(), 1);
            // Kept and read again, it is still the adopted one.
            let kept: Ca = serde_json::from_str(&serde_json::to_string(&ca).unwrap()).unwrap();
            assert!(kept.imported);
        }
        let (cert, key) = foreign_ca(&PKCS_ECDSA_P256_SHA256, true);
        let refused = |cert: &str, key: KeyPem, now, says: &str| {
            let e = Ca::import(cert, key, now).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
            // Nothing of a key (base64 of PKCS#8 and SEC1 EC keys begins so).
            assert!(!e.contains("MIGHAgEA") && !e.contains("MHcCAQEE"), "{e}");
        };
        let (leaf, leaf_key) = foreign_ca(&PKCS_ECDSA_P256_SHA256, false);
        refused(&leaf, leaf_key, NOW, "is not a CA certificate");
        refused(&cert, key.clone(), NOW + 400 * 86_400, "has expired");
        let (_, other_key) = foreign_ca(&PKCS_ECDSA_P256_SHA256, true);
        refused(&cert, other_key, NOW, "the key is not the key of");
        // A whole SEC1 key (cfssl's form), which rcgen reads: refused all the same.
        let sec1 = {
            use base64::Engine;
            let p8 = KeyPair::from_pem(key.expose()).unwrap().serialize_der();
            // PKCS#8 of P-256: version, the algorithm (21 bytes), then the SEC1 key in an
            // OCTET STRING.
            assert_eq!((p8[0], p8[27]), (0x30, 0x04), "a P-256 PKCS#8 key");
            let der = &p8[29..29 + p8[28] as usize];
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            KeyPem(format!(
                "-----BEGIN EC PRIVATE KEY-----\n{b64}\n-----END EC PRIVATE KEY-----\n"
            ))
        };
        assert!(KeyPair::from_pem(sec1.expose()).is_ok(), "rcgen reads SEC1");
        refused(&cert, sec1, NOW, "openssl pkcs8 -topk8");
        // An intermediate (issued by another CA) is refused.
        let root = Ca::generate("root", NOW).unwrap();
        let mut p = params("intermediate", NOW, NOW + 86_400).unwrap();
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let inter_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let inter = p.signed_by(&inter_key, &root.issuer().unwrap()).unwrap();
        let inter_pem = KeyPem(inter_key.serialize_pem());
        refused(&inter.pem(), inter_pem, NOW, "not an intermediate");
        refused(
            &format!("{cert}{cert}"),
            key.clone(),
            NOW,
            "one PEM CERTIFICATE block",
        );
        refused("not a certificate", key, NOW, "one PEM CERTIFICATE block");
    }
}
