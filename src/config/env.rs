//! How the sections read the environment: a variable unset or blank takes its default; a
//! number in its range, a port, a scheme, a switch; a bad value refused with the variable's
//! name and the value.

use std::time::Duration;

use super::vars::Var;
use crate::error::Error;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// The environment as the sections read it: a variable unset or blank takes its default.
pub(super) struct Env<'a> {
    pub(super) lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    pub(super) fn get(&self, var: &Var) -> Option<String> {
        (self.lookup)(var.name).filter(|v| !v.trim().is_empty())
    }

    pub(super) fn required(&self, var: &Var) -> Result<String, Error> {
        self.get(var)
            .ok_or_else(|| bad(var.name, "", "is required"))
    }

    /// A whole number from `min` to `max`, else the variable's default.
    pub(super) fn number(&self, var: &Var, min: u64, max: u64) -> Result<u64, Error> {
        let raw = self.get(var).unwrap_or_else(|| var.default.to_string());
        match raw.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(bad(
                var.name,
                &raw,
                &format!("must be a whole number from {min} to {max}"),
            )),
        }
    }

    pub(super) fn millis(&self, var: &Var, min: u64, max: u64) -> Result<Duration, Error> {
        Ok(Duration::from_millis(self.number(var, min, max)?))
    }

    pub(super) fn port(&self, var: &Var) -> Result<u16, Error> {
        Ok(self.number(var, 1, 65535)? as u16)
    }

    pub(super) fn scheme(&self, var: &Var) -> Result<Scheme, Error> {
        match self.get(var).as_deref().unwrap_or(var.default) {
            "http" => Ok(Scheme::Http),
            "https" => Ok(Scheme::Https),
            v => Err(bad(var.name, v, "must be 'http' or 'https'")),
        }
    }

    /// An on/off switch; unset: `default`.
    pub(super) fn switch(&self, var: &Var, default: bool) -> Result<bool, Error> {
        match self.get(var).as_deref() {
            None => Ok(default),
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            Some(v) => Err(bad(var.name, v, "must be 'on' or 'off'")),
        }
    }
}

pub(super) fn bad(var: &str, value: &str, reason: &str) -> Error {
    Error::Config {
        var: var.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Group, hook and cluster names as AWS allows them (1-255 printable characters, no control
/// characters), so a hostile value is refused at start rather than echoed into parameters.
pub(super) fn name_value(var: &str, value: String) -> Result<String, Error> {
    if value.len() > 255
        || value
            .chars()
            .any(|c| c.is_control() || c == ',' || c == '=')
    {
        return Err(bad(
            var,
            &value,
            "must be at most 255 characters without control characters, ',' or '='",
        ));
    }
    Ok(value)
}
