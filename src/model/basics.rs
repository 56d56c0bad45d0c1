//! The plain values the rest of the model is made of: a time (the caller's, never read from a
//! clock here) and an etcd member's id.

use std::fmt;

/// Seconds since the Unix epoch. The planner never reads a clock: time is passed in.
pub type Timestamp = i64;

/// An etcd member id. etcd speaks decimal on the JSON gateway and hex in etcdctl; we log hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct MemberId(pub u64);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_id_displays_in_hex_like_etcdctl() {
        assert_eq!(
            MemberId(5902601874476430397).to_string(),
            "51ea4121aab8f43d"
        );
    }
}
