//! Private keys and passwords, which never print: `Debug` shows `KeyPem(..)`, `Password(..)`,
//! so neither reaches a log line or an error message.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A private key in PEM. Shown as `KeyPem(..)`: never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyPem(pub(super) String);

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
