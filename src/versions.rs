//! etcd's versions as facts, and what etcd allows between two of them. Pure: the planner asks,
//! the observation supplies the versions (members' own status, the cluster version from
//! `/version`, each instance's declared version from its `etcd-asg-etcd-version` tag).
//!
//! The rules, each from etcd's documentation or source:
//! - upgrades go one minor at a time, and before the first member of the next minor joins, every
//!   member must run at least etcd's floor for leaving its minor: 3.5.32 for 3.5 → 3.6
//!   (<https://etcd.io/docs/v3.6/upgrades/upgrade_3_6/>: 3.6 makes the v3 store the source of
//!   truth for membership; older 3.5 releases lost learner promotions there, etcd-io/etcd#19557,
//!   and could bring removed members back, #20967,
//!   <https://etcd.io/blog/2025/zombie_members_upgrade/>) and 3.6.11 for 3.6 → 3.7
//!   (<https://etcd.io/docs/v3.7/upgrades/upgrade_3_7/>);
//! - a member older than the cluster version cannot join: etcd refuses to start it
//!   (`isCompatibleWithVers`,
//!   <https://github.com/etcd-io/etcd/blob/v3.6.17/server/etcdserver/cluster_util.go>); going
//!   back is etcd's downgrade protocol (<https://etcd.io/docs/v3.6/downgrades/>), never a binary;
//! - no member of 3.5 or later joins a 3.4 cluster with authentication on: no rolling upgrade
//!   from 3.4 with auth enabled (<https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/>; `auth_admission`);
//! - a snapshot is restored only by an etcd of its minor or newer: a binary refuses a data
//!   directory whose storage version is newer than its own
//!   (<https://github.com/etcd-io/etcd/blob/v3.6.17/server/storage/schema/schema.go>).

use std::fmt;
use std::str::FromStr;

/// One etcd release, as `etcd --version`, a status response or `/version` names it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// `3.6` of `3.6.17`.
    pub fn minor_str(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    fn same_minor(&self, other: &Version) -> bool {
        (self.major, self.minor) == (other.major, other.minor)
    }

    /// The minor after this one's (`3.6` → `3.7`): etcd 3 has only minors.
    fn next_minor(&self) -> (u32, u32) {
        (self.major, self.minor + 1)
    }

    /// etcd's own corruption checks, each version's names for them: the initial check (a member
    /// compares its data with its peers' before serving) and the leader's periodic comparison of
    /// compaction hashes. 3.4: `--experimental-initial-corrupt-check` only
    /// (<https://etcd.io/docs/v3.4/op-guide/configuration/>); 3.5: that and
    /// `--experimental-compact-hash-check-enabled` (<https://etcd.io/docs/v3.5/op-guide/data_corruption/>);
    /// 3.6 on: the feature gates `InitialCorruptCheck` and `CompactHashCheck`, the experimental
    /// flags deprecated and gone in 3.7 (<https://etcd.io/docs/v3.6/op-guide/data_corruption/>,
    /// `server/features/etcd_features.go`). As `ETCD_*` variables (etcd reads each flag so).
    pub fn corruption_check_env(&self) -> &'static str {
        match (self.major, self.minor) {
            (3, 0..=4) => "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true\n",
            (3, 5) => {
                "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true\n\
                 ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED=true\n"
            }
            _ => "ETCD_FEATURE_GATES=InitialCorruptCheck=true,CompactHashCheck=true\n",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = String;

    /// `3.6.17`, `v3.6.17`, `3.6.0-rc.0` (a pre-release counts as its release); nothing else.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an etcd version (MAJOR.MINOR.PATCH)");
        let core = s.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.').map(|p| p.parse::<u32>().map_err(|_| bad()));
        let v = Version::new(
            parts.next().ok_or_else(bad)??,
            parts.next().ok_or_else(bad)??,
            parts.next().ok_or_else(bad)??,
        );
        if parts.next().is_some() || v.major != 3 {
            return Err(bad());
        }
        Ok(v)
    }
}

/// The lowest release every member of a minor must run before the first member of the next minor
/// joins (see the module's links). None: etcd sets no floor for leaving that minor.
pub fn floor_for_leaving(major: u32, minor: u32) -> Option<Version> {
    match (major, minor) {
        (3, 5) => Some(Version::new(3, 5, 32)),
        (3, 6) => Some(Version::new(3, 6, 11)),
        _ => None,
    }
}

/// What etcd allows for a new member.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Admission {
    Join,
    /// Not yet: `why` names the members and versions that hold it.
    Wait(String),
    /// Never, with this binary: `why` says what etcd refuses.
    Refuse(String),
}

/// Whether an etcd `joiner` may join a cluster at `cluster` version whose members run `members`
/// (by name; None: the member did not say). An upgrade's first member of the next minor waits
/// until every member is at or above the floor; two minors ahead or older than the cluster
/// version is refused.
pub fn admission(
    joiner: Version,
    cluster: Version,
    members: &[(String, Option<Version>)],
) -> Admission {
    if joiner.major != cluster.major || joiner.minor < cluster.minor {
        return Admission::Refuse(format!(
            "etcd {joiner} cannot join a cluster at version {} (etcd refuses a member older than \
             the cluster version; going back needs etcd's downgrade protocol)",
            cluster.minor_str()
        ));
    }
    if joiner.same_minor(&cluster) {
        return same_minor(joiner, cluster, members);
    }
    if (joiner.major, joiner.minor) != cluster.next_minor() {
        // The leader raises the cluster version a few seconds after the last member of a minor
        // joins: while every member already runs the minor before the joiner's, it only lags.
        let caught_up = !members.is_empty()
            && members.iter().all(|(_, v)| {
                v.is_some_and(|v| (v.major, v.minor + 1) >= (joiner.major, joiner.minor))
            });
        if caught_up {
            return Admission::Wait(format!(
                "etcd {joiner} waits for the cluster version ({}) to rise: every member runs {}.{} or later",
                cluster.minor_str(),
                joiner.major,
                joiner.minor - 1
            ));
        }
        return Admission::Refuse(format!(
            "etcd {joiner} is more than one minor ahead of the cluster version {} (etcd upgrades \
             one minor at a time)",
            cluster.minor_str()
        ));
    }
    let Some(floor) = floor_for_leaving(cluster.major, cluster.minor) else {
        return Admission::Join;
    };
    let below: Vec<String> = members
        .iter()
        .filter(|(_, v)| v.is_none_or(|v| v < floor))
        .map(|(name, v)| match v {
            Some(v) => format!("{name} runs {v}"),
            None => format!("{name} did not say its version"),
        })
        .collect();
    if below.is_empty() {
        Admission::Join
    } else {
        Admission::Wait(format!(
            "etcd {joiner} waits until every member runs at least {floor}, etcd's floor for \
             leaving {}: {}",
            cluster.minor_str(),
            below.join(", ")
        ))
    }
}

/// A joiner of the cluster version's own minor: it joins, except while an upgrade is under way
/// (a member already runs the next minor) and it is below etcd's floor for leaving its minor —
/// the floor holds for every member while the next minor is present, a joiner included.
fn same_minor(
    joiner: Version,
    cluster: Version,
    members: &[(String, Option<Version>)],
) -> Admission {
    let Some(floor) = floor_for_leaving(cluster.major, cluster.minor) else {
        return Admission::Join;
    };
    let next = members.iter().find_map(|(name, v)| {
        v.filter(|v| (v.major, v.minor) == cluster.next_minor())
            .map(|v| format!("{name} runs {v}"))
    });
    match next {
        Some(newer) if joiner < floor => Admission::Wait(format!(
            "etcd {joiner} is below {floor}, etcd's floor for leaving {} while the next minor is \
             present ({newer}): launch {floor} or later",
            cluster.minor_str()
        )),
        _ => Admission::Join,
    }
}

/// What a snapshot taken on an etcd of `binary`'s release needs of its restorer, when the
/// cluster version was `cluster`: a member writes its data's storage version only once the
/// cluster version has reached its own minor (3.6's storage version monitor,
/// `UpdateStorageVersion` in
/// <https://github.com/etcd-io/etcd/blob/v3.6.17/server/etcdserver/version/monitor.go>; a data
/// directory with no storage version reads as 3.5, `schema.DetectSchemaVersion`), so a 3.6
/// member's snapshot of a cluster still at 3.5 is read by 3.5. The cluster version's minor
/// `.0` then; the release itself when the cluster version is unknown (never lower than true).
pub fn storage_of(binary: Version, cluster: Option<Version>) -> Version {
    match cluster {
        Some(c) if c.major == binary.major && c.minor < binary.minor => {
            Version::new(c.major, c.minor, 0)
        }
        _ => binary,
    }
}

impl Admission {
    /// This answer, or, when it is `Join`, `next`'s: each rule may hold a joiner back.
    pub fn then(self, next: impl FnOnce() -> Admission) -> Admission {
        match self {
            Admission::Join => next(),
            held => held,
        }
    }
}

/// What etcd allows for a `joiner` into a cluster at `cluster` version whose authentication is
/// on (`auth_enabled`), beside `admission`: no member of 3.5 or later joins a cluster of 3.4 or
/// older with authentication on. etcd's 3.5 upgrade guide: "If your cluster enables auth,
/// rolling upgrade from 3.4 or older version isn't supported because 3.5 changes a format of WAL
/// entries related to auth" (<https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/>,
/// etcd-io/etcd#11943); a joiner of the new minor into the old cluster is that rolling upgrade.
/// Refused, not waited for: the cluster version rises only once every member runs 3.5, which
/// this rule keeps from happening; what ends it is an operator (authentication off, or the
/// stack's EtcdVersion of the cluster's minor).
pub fn auth_admission(joiner: Version, cluster: Version, auth_enabled: bool) -> Admission {
    let old = (cluster.major, cluster.minor) <= (3, 4);
    if auth_enabled && old && (joiner.major, joiner.minor) >= (3, 5) {
        return Admission::Refuse(format!(
            "etcd {joiner} cannot join a cluster at version {} with authentication on (etcd does \
             not support a rolling upgrade from 3.4 with auth enabled: 3.5 changed the WAL form \
             of auth entries, https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/): turn \
             authentication off first (etcdctl auth disable; the function turns it on again \
             only once no member runs 3.4, unless EtcdAuth=off), or run the cluster's minor",
            cluster.minor_str()
        ));
    }
    Admission::Join
}

/// Whether etcd's authentication may be turned on: never while 3.4 and 3.5 or later meet (a
/// cluster version of 3.4 or unknown, or a member on 3.4, beside a member on 3.5 or later):
/// etcd does not support a rolling upgrade from 3.4 with authentication on
/// (<https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/>; etcd PR #11943 changed the WAL form of
/// auth entries), the state `auth_admission` keeps joins out of.
pub fn auth_may_turn_on(cluster: Option<Version>, members: &[Option<Version>]) -> bool {
    let minor = |v: &Version| (v.major, v.minor);
    let newer = members.iter().flatten().any(|v| minor(v) >= (3, 5));
    let old = cluster.is_none_or(|c| minor(&c) <= (3, 4))
        || members.iter().flatten().any(|v| minor(v) <= (3, 4));
    !(newer && old)
}

/// Whether an etcd of `restorer`'s version can restore a snapshot taken on `taken_on`: of its
/// minor or the one before (a newer storage version is refused; upgrades, a restore included, go
/// one minor at a time).
pub fn can_restore(taken_on: Version, restorer: Version) -> bool {
    taken_on.major == restorer.major
        && taken_on.minor <= restorer.minor
        && restorer.minor - taken_on.minor <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    fn members(vs: &[&str]) -> Vec<(String, Option<Version>)> {
        vs.iter()
            .enumerate()
            .map(|(n, s)| (format!("i-{n}"), s.parse().ok()))
            .collect()
    }

    #[test]
    fn parses_what_etcd_prints_and_refuses_the_rest() {
        assert_eq!(v("3.6.17"), Version::new(3, 6, 17));
        assert_eq!(v("v3.7.0-rc.0"), Version::new(3, 7, 0));
        for bad in ["", "3.6", "3.6.x", "4.0.0", "3.6.1.2", "not_decided"] {
            let e = bad.parse::<Version>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// etcd's upgrade guides: https://etcd.io/docs/v3.6/upgrades/upgrade_3_6/,
    /// https://etcd.io/docs/v3.7/upgrades/upgrade_3_7/; cluster_util.go isCompatibleWithVers.
    #[test]
    fn admission_table() {
        use Admission::*;
        let cases: &[(&str, &str, &[&str], &str)] = &[
            // joiner, cluster version, members, expected (J / W / R)
            ("3.6.17", "3.6.0", &["3.6.17", "3.6.14"], "J"),
            ("3.6.17", "3.6.0", &["3.5.30"], "J"), // same minor as the cluster: no floor
            ("3.5.36", "3.5.0", &["3.5.30"], "J"),
            ("3.6.17", "3.5.0", &["3.5.36", "3.5.32"], "J"),
            ("3.6.17", "3.5.0", &["3.5.36", "3.5.30"], "W"),
            ("3.6.17", "3.5.0", &["3.5.36", "?"], "W"),
            ("3.7.4", "3.6.0", &["3.6.17", "3.6.11"], "J"),
            ("3.7.4", "3.6.0", &["3.6.17", "3.6.10"], "W"),
            ("3.5.36", "3.4.0", &["3.4.23"], "J"), // etcd sets no floor for leaving 3.4
            ("3.7.4", "3.5.0", &["3.5.36"], "R"),  // two minors ahead
            ("3.7.4", "3.5.0", &["3.6.17", "3.6.17"], "W"), // the cluster version lags
            ("3.5.36", "3.6.0", &["3.6.17"], "R"), // older than the cluster version
            ("3.4.23", "3.5.0", &["3.5.36"], "R"),
            // Same minor as the cluster, while the next minor is present: the floor holds.
            ("3.5.30", "3.5.0", &["3.5.36", "3.6.17"], "W"),
            ("3.5.32", "3.5.0", &["3.5.36", "3.6.17"], "J"),
            ("3.6.10", "3.6.0", &["3.6.17", "3.7.4"], "W"),
            ("3.6.10", "3.6.0", &["3.6.17", "3.6.11"], "J"), // no upgrade under way
        ];
        for (joiner, cluster, ms, want) in cases {
            let got = admission(v(joiner), v(cluster), &members(ms));
            let kind = match &got {
                Join => "J",
                Wait(_) => "W",
                Refuse(_) => "R",
            };
            assert_eq!(kind, *want, "{joiner} into {cluster} with {ms:?}: {got:?}");
        }
        let Wait(why) = admission(v("3.6.17"), v("3.5.0"), &members(&["3.5.36", "3.5.30"])) else {
            panic!()
        };
        assert!(
            why.contains("i-1 runs 3.5.30") && why.contains("3.5.32"),
            "{why}"
        );
        assert!(!why.contains("i-0"), "{why}");
    }

    /// A 3.6 member's snapshot of a cluster still at 3.5 holds 3.5's storage: 3.5 restores it.
    #[test]
    fn a_snapshots_storage_follows_the_cluster_version_not_the_members_release() {
        let needs = |binary: &str, cluster: Option<&str>| storage_of(v(binary), cluster.map(v));
        assert_eq!(needs("3.6.17", Some("3.5.0")), v("3.5.0"));
        assert!(can_restore(needs("3.6.17", Some("3.5.0")), v("3.5.36")));
        assert_eq!(needs("3.6.17", Some("3.6.0")), v("3.6.17"));
        assert!(!can_restore(needs("3.7.4", Some("3.7.0")), v("3.6.17")));
        // Unknown cluster version: the release itself, never lower than the truth.
        assert_eq!(needs("3.7.4", None), v("3.7.4"));
        assert!(!can_restore(needs("3.7.4", None), v("3.6.17")));
    }

    /// https://etcd.io/docs/v3.5/upgrades/upgrade_3_5/ (etcd-io/etcd#11943): no rolling upgrade
    /// from 3.4 with authentication on.
    #[test]
    fn authentication_never_turns_on_where_3_4_meets_3_5() {
        let may = |cluster: &str, ms: &[&str]| {
            let ms: Vec<Option<Version>> = ms.iter().map(|s| s.parse().ok()).collect();
            auth_may_turn_on(cluster.parse().ok(), &ms)
        };
        assert!(!may("3.4.0", &["3.4.23", "3.5.36"]));
        assert!(!may("3.4.0", &["3.5.36", "3.5.36"])); // the cluster version lags
        assert!(!may("unknown", &["3.5.36"]));
        assert!(may("3.4.0", &["3.4.23", "3.4.23"]));
        assert!(may("3.5.0", &["3.5.36", "3.6.17"]));
    }

    #[test]
    fn auth_admission_table() {
        let cases: &[(&str, &str, bool, bool)] = &[
            // joiner, cluster version, auth on, joins
            ("3.5.30", "3.4.0", true, false),
            ("3.5.30", "3.4.0", false, true),
            ("3.4.23", "3.4.0", true, true),
            ("3.6.17", "3.5.0", true, true),
            ("3.6.17", "3.4.0", true, false), // refused by `admission` anyway
        ];
        for (joiner, cluster, auth, joins) in cases {
            let got = auth_admission(v(joiner), v(cluster), *auth);
            assert_eq!(
                got == Admission::Join,
                *joins,
                "{joiner} into {cluster}, auth {auth}: {got:?}"
            );
        }
        let Admission::Refuse(why) = auth_admission(v("3.5.30"), v("3.4.0"), true) else {
            panic!()
        };
        assert!(
            why.contains("3.5.30") && why.contains("3.4") && why.contains("upgrade_3_5"),
            "{why}"
        );
    }

    #[test]
    fn a_snapshot_is_restored_by_its_minor_or_newer() {
        assert!(can_restore(v("3.5.36"), v("3.6.17")));
        assert!(can_restore(v("3.6.17"), v("3.6.11")));
        assert!(!can_restore(v("3.7.4"), v("3.6.17")));
        assert!(
            !can_restore(v("3.4.23"), v("3.6.17")),
            "two minors: not a documented path"
        );
    }

    #[test]
    fn corruption_checks_named_as_each_version_names_them() {
        assert!(v("3.4.23")
            .corruption_check_env()
            .contains("EXPERIMENTAL_INITIAL_CORRUPT"));
        assert!(!v("3.4.23").corruption_check_env().contains("COMPACT_HASH"));
        assert!(v("3.5.36")
            .corruption_check_env()
            .contains("COMPACT_HASH_CHECK_ENABLED=true"));
        for s in ["3.6.17", "3.7.4"] {
            let env = v(s).corruption_check_env();
            assert!(
                env.contains("InitialCorruptCheck=true,CompactHashCheck=true"),
                "{env}"
            );
            assert!(!env.contains("EXPERIMENTAL"), "{env}");
        }
    }
}
