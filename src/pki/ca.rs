//! The cluster's CA: made here (`Ca::generate`), kept (a SecureString), and what it issues: a
//! certificate for each member, the function's own client certificate, and client certificates
//! for users. Nothing it issues outlives it.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use serde::{Deserialize, Serialize};

use super::keys::KeyPem;
use crate::error::Error;
use crate::model::Timestamp;

/// The CA's validity: ten years.
pub const CA_DAYS: i64 = 3650;
/// The function's own client certificate: a day (issued again by every new environment's first
/// invocation, and every half day in a warm one).
pub const FUNCTION_CERT_SECS: i64 = 86_400;

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

pub(super) fn pki(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
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

pub(super) fn params(
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

    /// The issuer: the kept key, and the CA's certificate for its subject and key identifier
    /// (an adopted CA's subject is whatever its owner made it; issued certificates must name it
    /// exactly).
    pub(super) fn issuer(&self) -> Result<Issuer<'static, KeyPair>, Error> {
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
    use crate::pki::fixtures::{parse, NOW};
    use crate::pki::Password;
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::*;

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
