//! Backups: where the snapshots go (BACKUP_BUCKET, BACKUP_PREFIX), when they are taken and how
//! long kept, and how a lost cluster comes back (RECOVERY).

use super::env::{bad, Env};
use super::vars::*;
use crate::error::Error;

/// Where the snapshots go.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BackupStore {
    pub bucket: String,
    /// Key prefix, without leading or trailing '/'.
    pub prefix: String,
}

impl BackupStore {
    /// None: no bucket, backups off. The key prefix defaults to the parameter prefix.
    pub(super) fn parse(env: &Env, parameter_prefix: &str) -> Result<Option<Self>, Error> {
        let Some(bucket) = env.get(&BACKUP_BUCKET) else {
            return Ok(None);
        };
        let ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
        if !ok {
            return Err(bad(
                BACKUP_BUCKET.name,
                &bucket,
                "must be an S3 bucket name: 3-63 lowercase letters, digits, '.', '-'",
            ));
        }
        let prefix = env
            .get(&BACKUP_PREFIX)
            .unwrap_or_else(|| parameter_prefix.to_string())
            .trim_matches('/')
            .to_string();
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            return Err(bad(
                BACKUP_PREFIX.name,
                &prefix,
                "must be a key prefix of letters, digits, '/', '_', '.', '-'",
            ));
        }
        Ok(Some(Self { bucket, prefix }))
    }
}

/// When snapshots are taken and kept, and how a lost cluster comes back.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BackupPolicy {
    pub interval_secs: i64,
    /// One snapshot per hour is kept this many days...
    pub hourly_days: i64,
    /// ...and one per day this many.
    pub daily_days: i64,
    pub recovery: Recovery,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Recovery {
    /// Restore the freshest data by itself when every member is lost.
    Auto,
    /// Wait for an operator's restore request (`<prefix>/restore-request`).
    Manual,
}

#[cfg(test)]
impl BackupPolicy {
    /// The tests' policy: a snapshot every 15 minutes, one an hour kept for a week and one a
    /// day for 90 days, RECOVERY=auto.
    pub fn for_tests() -> Self {
        BackupPolicy {
            interval_secs: 900,
            hourly_days: 7,
            daily_days: 90,
            recovery: Recovery::Auto,
        }
    }
}

impl BackupPolicy {
    pub(super) fn parse(env: &Env) -> Result<Self, Error> {
        Ok(Self {
            interval_secs: env.number(&BACKUP_INTERVAL_MINUTES, 1, 1440)? as i64 * 60,
            hourly_days: env.number(&BACKUP_HOURLY_DAYS, 1, 365)? as i64,
            daily_days: env.number(&BACKUP_DAILY_DAYS, 1, 3650)? as i64,
            recovery: match env.get(&RECOVERY).as_deref().unwrap_or(RECOVERY.default) {
                "auto" => Recovery::Auto,
                "manual" => Recovery::Manual,
                v => return Err(bad(RECOVERY.name, v, "must be 'auto' or 'manual'")),
            },
        })
    }
}
