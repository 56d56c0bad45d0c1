//! The cluster's certificates: a CA the function keeps, a certificate for each member issued when
//! it joins, and client certificates (the function's own, short-lived, and those an operator
//! issues for programs). ECDSA P-256 throughout, through `rcgen`: no ASN.1 by hand.
//!
//! Pure apart from key generation: the time is the caller's. Private keys are `KeyPem`, whose
//! `Debug` prints nothing of the key, so a key never reaches a log line or an error message.

use std::fmt;
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, PKCS_ECDSA_P256_SHA256,
};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::model::Timestamp;

/// The CA's validity: ten years.
pub const CA_DAYS: i64 = 3650;
/// The function's own client certificate: a day (issued again by every new environment's first
/// invocation, and every half day in a warm one).
pub const FUNCTION_CERT_SECS: i64 = 86_400;
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

/// A private key in PEM. Shown as `KeyPem(..)`: never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyPem(String);

impl KeyPem {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for KeyPem {
    fn from(pem: String) -> Self {
        KeyPem(pem)
    }
}

impl fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyPem(..)")
    }
}

/// A password (a gateway user's). Shown as `Password(..)`: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// 32 characters of URL-safe base64 from 24 random bytes of the OS (192 bits).
    pub fn generate() -> Result<Password, Error> {
        use base64::Engine;
        let mut bytes = [0u8; 24];
        getrandom::getrandom(&mut bytes).map_err(|e| Error::Pki {
            what: "a password",
            detail: e.to_string(),
        })?;
        Ok(Password(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        ))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A password someone else chose (an adopted cluster's `root`'s), read from a secret.
    pub fn given(password: String) -> Password {
        Password(password)
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

/// The cluster's CA as it is kept (a SecureString): its subject name, certificate and key; and,
/// kept apart (`<prefix>/pki/token-key`), the cluster's token key (see `RootTokens`).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Ca {
    pub common_name: String,
    pub cert_pem: String,
    pub key_pem: KeyPem,
    pub not_after: Timestamp,
    /// The key members and the function sign etcd's tokens with (PKCS#8 PEM, ECDSA P-256):
    /// kept in a parameter of its own and set after loading (`reconciler::setup::cluster_ca`). None: a
    /// caller that only issues certificates (or the tables' CA).
    #[serde(skip)]
    pub token_key: Option<KeyPem>,
    /// An adopted cluster's CA (`Ca::import`): its key never signs the function's tokens (no
    /// member ever verified tokens with its certificate, and a member of the adopted cluster
    /// refuses them anyway).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub imported: bool,
}

/// A fresh key for etcd's JWT tokens (ECDSA P-256, PKCS#8 PEM: etcd 3.4.17+ and 3.5 read it,
/// golang-jwt's `ParseECPrivateKeyFromPEM` falling back to PKCS#8).
pub fn generate_token_key() -> Result<KeyPem, Error> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(pki("token key"))?;
    Ok(KeyPem(key.serialize_pem()))
}

/// A certificate and its key, as handed to a member or a client.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: KeyPem,
    pub not_after: Timestamp,
}

impl Issued {
    /// What a member is handed: the CA's certificate, its own, its key and, where the cluster
    /// has one, the token key, in that order.
    pub fn bundle(&self, ca: &Ca) -> KeyPem {
        KeyPem(format!(
            "{}{}{}{}",
            ca.cert_pem,
            self.cert_pem,
            self.key_pem.expose(),
            ca.token_key.as_ref().map_or("", |k| k.expose())
        ))
    }
}

fn pki(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |e| Error::Pki {
        what,
        detail: e.to_string(),
    }
}

fn time(t: Timestamp) -> Result<time::OffsetDateTime, Error> {
    time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| Error::Pki {
        what: "a validity date",
        detail: e.to_string(),
    })
}

fn params(
    common_name: &str,
    from: Timestamp,
    until: Timestamp,
) -> Result<CertificateParams, Error> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    p.distinguished_name = dn;
    // A little slack for clocks behind ours.
    p.not_before = time(from - 300)?;
    p.not_after = time(until)?;
    Ok(p)
}

impl Ca {
    /// A new CA for `cluster`, valid `CA_DAYS` from `now`.
    pub fn generate(cluster: &str, now: Timestamp) -> Result<Ca, Error> {
        let common_name = format!("etcd-asg-lifecycle {cluster} CA");
        let not_after = now + CA_DAYS * 86_400;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(pki("CA key"))?;
        let cert = Self::params(&common_name, now, not_after)?
            .self_signed(&key)
            .map_err(pki("CA certificate"))?;
        Ok(Ca {
            common_name,
            cert_pem: cert.pem(),
            key_pem: KeyPem(key.serialize_pem()),
            not_after,
            token_key: None,
            imported: false,
        })
    }

    fn params(
        common_name: &str,
        now: Timestamp,
        not_after: Timestamp,
    ) -> Result<CertificateParams, Error> {
        let mut p = params(common_name, now, not_after)?;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(p)
    }

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

    /// The issuer: the kept key, and the CA's certificate for its subject and key identifier
    /// (an adopted CA's subject is whatever its owner made it; issued certificates must name it
    /// exactly).
    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, Error> {
        let key = KeyPair::from_pem(self.key_pem.expose()).map_err(pki("reading the CA key"))?;
        Issuer::from_ca_cert_pem(&self.cert_pem, key).map_err(pki("reading the CA certificate"))
    }

    fn sign(&self, mut p: CertificateParams, now: Timestamp) -> Result<Issued, Error> {
        let issuer = self.issuer()?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(pki("key"))?;
        p.use_authority_key_identifier_extension = true;
        // No serial given: rcgen derives 20 bytes from the SHA-256 of the fresh (random) public
        // key, unique and unpredictable as RFC 5280 asks.
        // Never past the CA's own end.
        let not_after = p.not_after.unix_timestamp().min(self.not_after);
        p.not_after = time(not_after)?;
        if not_after <= now {
            return Err(Error::Pki {
                what: "issuing",
                detail: "the CA has expired".into(),
            });
        }
        let cert = p.signed_by(&key, &issuer).map_err(pki("signing"))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: KeyPem(key.serialize_pem()),
            not_after,
        })
    }

    /// A member's certificate: server and client usage (etcd uses it for both client and peer
    /// TLS), its instance id as the subject, its address as a SAN.
    /// `extra_names` are further SANs every member carries (the load balancer's DNS name,
    /// through which clients reach any member).
    pub fn issue_member(
        &self,
        instance: &str,
        address: &str,
        extra_names: &[String],
        secs: i64,
        now: Timestamp,
    ) -> Result<Issued, Error> {
        let mut p = params(instance, now, now + secs)?;
        p.subject_alt_names = vec![san(address)?];
        for name in extra_names.iter().filter(|n| !n.is_empty()) {
            p.subject_alt_names.push(san(name)?);
        }
        // ECDSA keys sign; key encipherment is for RSA key transport (RFC 5480).
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(p, now)
    }

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

    /// The function's own client certificate: no common name, because etcd's JSON gateway
    /// refuses a certificate with one once authentication is on (it would not act as that user);
    /// the function is `root` through its tokens instead.
    pub fn issue_function(&self, secs: i64, now: Timestamp) -> Result<Issued, Error> {
        let mut p = params("", now, now + secs)?;
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name
            .push(DnType::OrganizationName, "etcd-asg-lifecycle function");
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(p, now)
    }

    /// A client certificate for etcd user `user` (etcd takes the user from the common name);
    /// for a gateway user (`common_name` false) none: etcd's JSON gateway refuses a certificate
    /// with one once authentication is on, and the user logs in with a password instead.
    pub fn issue_client(
        &self,
        user: &str,
        secs: i64,
        now: Timestamp,
        common_name: bool,
    ) -> Result<Issued, Error> {
        if user.is_empty()
            || !user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(Error::Pki {
                what: "issuing a client certificate",
                detail: format!("{user:?} is not a user name (letters, digits, '-', '_', '.')"),
            });
        }
        let mut p = params(user, now, now + secs)?;
        if !common_name {
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name.push(
                DnType::OrganizationName,
                format!("etcd gateway user {user}"),
            );
        }
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(p, now)
    }
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

/// An IP address or a DNS name.
pub fn san(name: &str) -> Result<SanType, Error> {
    match name.parse::<IpAddr>() {
        Ok(ip) => Ok(SanType::IpAddress(ip)),
        Err(_) => Ok(SanType::DnsName(
            name.to_string().try_into().map_err(pki("a DNS name"))?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::*;

    const NOW: Timestamp = 1_800_000_000;

    fn parse(pem: &str) -> Vec<u8> {
        let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        p.contents
    }

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

    #[test]
    fn a_member_certificate_verifies_against_the_ca_with_its_sans_usages_and_validity() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let m = ca
            .issue_member(
                "i-0abc",
                "10.0.1.7",
                &["etcd-nlb-123.elb.us-east-1.amazonaws.com".into()],
                90 * 86_400,
                NOW,
            )
            .unwrap();
        let ca_der = parse(&ca.cert_pem);
        let der = parse(&m.cert_pem);
        let (_, ca_x) = X509Certificate::from_der(&ca_der).unwrap();
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        x.verify_signature(Some(ca_x.public_key())).unwrap();
        assert_eq!(x.issuer(), ca_x.subject());
        assert!(ca_x.is_ca());
        assert!(!x.is_ca());
        let sans = x.subject_alternative_name().unwrap().unwrap();
        let names: Vec<String> = sans
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::IPAddress(b) => format!("ip:{b:?}"),
                GeneralName::DNSName(d) => format!("dns:{d}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "ip:[10, 0, 1, 7]",
                "dns:etcd-nlb-123.elb.us-east-1.amazonaws.com"
            ]
        );
        let eku = x.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        assert_eq!(x.validity().not_after.timestamp(), NOW + 90 * 86_400);
        assert_eq!(m.not_after, NOW + 90 * 86_400);
        assert!(x.validity().not_before.timestamp() <= NOW);
        assert_eq!(
            ca_x.validity().not_after.timestamp(),
            NOW + CA_DAYS * 86_400
        );
        // A certificate of another CA does not verify.
        let other = Ca::generate("prod", NOW).unwrap();
        let o_der = parse(&other.cert_pem);
        let (_, o) = X509Certificate::from_der(&o_der).unwrap();
        assert!(x.verify_signature(Some(o.public_key())).is_err());
    }

    #[test]
    fn a_client_certificate_names_its_user_and_is_for_clients_only() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let c = ca.issue_client("app-reader", 3600, NOW, true).unwrap();
        let der = parse(&c.cert_pem);
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        let cn = x
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(cn, "app-reader");
        let eku = x.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        assert_eq!(c.not_after, NOW + 3600);
        for bad in ["", "a b", "x\ny", "../root"] {
            let e = ca
                .issue_client(bad, 3600, NOW, true)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a user name"), "{e}");
        }
    }

    #[test]
    fn nothing_outlives_the_ca_and_nothing_is_issued_by_an_expired_one() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let late = ca.not_after - 86_400;
        let m = ca
            .issue_member("i-1", "10.0.0.1", &[], 90 * 86_400, late)
            .unwrap();
        assert_eq!(m.not_after, ca.not_after);
        assert!(ca
            .issue_member("i-1", "10.0.0.1", &[], 90 * 86_400, ca.not_after + 1)
            .is_err());
    }

    #[test]
    fn keys_never_show_in_debug_output() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let m = ca
            .issue_member("i-1", "10.0.0.1", &[], 86_400, NOW)
            .unwrap();
        for shown in [format!("{ca:?}"), format!("{m:?}")] {
            assert!(!shown.contains("PRIVATE KEY"), "{shown}");
            assert!(shown.contains("KeyPem(..)"));
        }
        // The kept form round-trips (every new environment reads it back).
        let kept = serde_json::to_string(&ca).unwrap();
        let back: Ca = serde_json::from_str(&kept).unwrap();
        assert_eq!(back, ca);
        assert!(back.issue_client("root", 60, NOW, true).is_ok());
    }

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

    #[test]
    fn a_gateway_users_certificate_has_no_common_name_and_passwords_are_random_and_hidden() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let c = ca.issue_client("gw", 3600, NOW, false).unwrap();
        let der = parse(&c.cert_pem);
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(x.subject().iter_common_name().count(), 0);
        assert!(x.subject().to_string().contains("etcd gateway user gw"));
        let (a, b) = (Password::generate().unwrap(), Password::generate().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 32);
        assert_eq!(format!("{a:?}"), "Password(..)");
    }

    #[test]
    fn the_function_certificate_has_no_common_name() {
        let ca = Ca::generate("prod", NOW).unwrap();
        let c = ca.issue_function(FUNCTION_CERT_SECS, NOW).unwrap();
        let der = parse(&c.cert_pem);
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(x.subject().iter_common_name().count(), 0);
        let eku = x.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let ca_der = parse(&ca.cert_pem);
        let (_, cax) = X509Certificate::from_der(&ca_der).unwrap();
        x.verify_signature(Some(cax.public_key())).unwrap();
    }
}
