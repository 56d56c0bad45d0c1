//! What each invocation tells CloudWatch, as Embedded Metric Format: one JSON log line that
//! CloudWatch turns into metrics, with no API call (namespace `EtcdAsgLifecycle`, dimension
//! `ClusterName`). Computed from the invocation's last observation and what it did.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::model::quorum;
use crate::model::{ClusterState, LifecycleState, Observation};
use crate::planner::Wait;

pub const NAMESPACE: &str = "EtcdAsgLifecycle";

/// Metric name → (value, CloudWatch unit).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Metrics(pub BTreeMap<String, (i64, &'static str)>);

/// How many of the plan's waits feed metric `name` (what feeds which is the wait's to say:
/// `Wait::feeds`).
fn fed(waits: &[Wait], name: &str) -> i64 {
    waits.iter().filter(|w| w.feeds().contains(&name)).count() as i64
}

impl Metrics {
    fn set(&mut self, name: impl Into<String>, value: i64, unit: &'static str) {
        self.0.insert(name.into(), (value, unit));
    }

    /// Adds one to a count (steps applied, refusals, errors by kind).
    pub fn count(&mut self, name: impl Into<String>) {
        self.0.entry(name.into()).or_insert((0, "Count")).0 += 1;
    }

    /// TLS=managed: whole days until the cluster's CA ends (the stack alarms a year ahead).
    pub fn ca_days_left(
        &mut self,
        not_after: crate::model::Timestamp,
        now: crate::model::Timestamp,
    ) {
        self.set("CaDaysLeft", (not_after - now).div_euclid(86_400), "Count");
    }

    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.get(name).map(|(v, _)| *v)
    }

    /// Instances held because etcd would not let their release join yet, or whose release is
    /// unknown, and restores with no backup the seed's etcd can read (VersionGateAlarm); members
    /// etcd raised its CORRUPT alarm for (CorruptMemberAlarm).
    fn versions(&mut self, obs: &Observation, waits: &[Wait]) {
        self.set("VersionGated", fed(waits, "VersionGated"), "Count");
        if let ClusterState::Known(view) = &obs.cluster {
            self.set("CorruptMembers", view.corrupt().len() as i64, "Count");
        }
    }

    /// The cluster's state as this observation shows it, and the waits the plan reported.
    pub fn observed(obs: &Observation, waits: &[Wait]) -> Self {
        let mut m = Self::default();
        m.holds(obs, waits);
        // Instances EC2 did not describe this time (an impaired zone, new ones it does not know
        // yet): they went with the address they were published with, or none.
        m.set(
            "InstancesUndescribed",
            obs.undescribed.len() as i64,
            "Count",
        );
        // The group's zones, and what one zone's loss would leave (ZoneRiskAlarm).
        m.set("Zones", obs.zones.len() as i64, "Count");
        if let Some(loss) = crate::planner::zones::worst_zone_loss(obs) {
            m.set("ZoneLossQuorumMargin", loss.margin(), "Count");
        }
        let risk = crate::planner::zones::zone_risk(obs).is_some();
        m.set("ZoneRisk", i64::from(risk), "Count");
        // Members due to be replaced that the group will not replace, its processes suspended
        // (ReplacementSuspendedAlarm).
        let suspended = fed(waits, "ReplacementsSuspended");
        m.set("ReplacementsSuspended", suspended, "Count");
        m.versions(obs, waits);
        if obs.backups_failing.is_some() {
            // Once per invocation: its listing, a snapshot or an upload failed (BackupFailingAlarm).
            m.set("BackupFailed", 1, "Count");
        }
        // TLS=managed: the member certificate that ends first, of the instances still in the
        // group (rotation replaces it at a third of its life; MemberCertExpiringAlarm: starved).
        let first_end = obs
            .published
            .cert_not_after
            .iter()
            .filter(|(id, _)| obs.instance(id).is_some_and(|i| i.state.is_present()))
            .map(|(_, &not_after)| not_after)
            .min();
        if let Some(not_after) = first_end {
            m.set(
                "MemberCertDaysLeft",
                (not_after - obs.now).div_euclid(86_400),
                "Count",
            );
        }
        // Voters down for the function alone (their peers connected to them): never replaced
        // on that view (MemberUnreachableFromFunctionAlarm).
        let cut_off = fed(waits, "MemberUnreachableFromFunction");
        m.set("MemberUnreachableFromFunction", cut_off, "Count");
        let over = fed(waits, "LiveDataOverQuota") > 0;
        m.set("LiveDataOverQuota", i64::from(over), "Count");
        if let Some(record) = &obs.published.cluster {
            if let Some(b) = crate::planner::snapshots::latest(&obs.backups, &record.token) {
                m.set("SecondsSinceLastBackup", obs.now - b.taken_at, "Seconds");
            }
        }
        m.cluster(obs);
        m
    }

    /// Instances held in their hooks: how many, how long the oldest launch, and why.
    fn holds(&mut self, obs: &Observation, waits: &[Wait]) {
        let held: Vec<_> = obs
            .instances
            .iter()
            .filter(|i| {
                matches!(
                    i.state,
                    LifecycleState::PendingWait | LifecycleState::TerminatingWait
                )
            })
            .collect();
        self.set("InstancesHeld", held.len() as i64, "Count");
        let oldest_launch = held
            .iter()
            .filter(|i| i.state == LifecycleState::PendingWait)
            .map(|i| obs.now - i.launched_at)
            .max()
            .unwrap_or(0);
        self.set("OldestLaunchHoldSeconds", oldest_launch.max(0), "Seconds");
        let terminating = held
            .iter()
            .filter(|i| i.state == LifecycleState::TerminatingWait)
            .count();
        self.set("TerminationsHeld", terminating as i64, "Count");
        self.set("HeldForQuorum", fed(waits, "HeldForQuorum"), "Count");
        let unreachable_holds = crate::planner::held_while_unreachable(obs).len();
        self.set("HeldWhileUnreachable", unreachable_holds as i64, "Count");
    }

    /// Members, the quorum's margin, database sizes, the space alarm.
    fn cluster(&mut self, obs: &Observation) {
        match &obs.cluster {
            ClusterState::Known(v) => {
                let voters = v.voters().count();
                let healthy = v.voters().filter(|m| v.healthy.contains(&m.id)).count();
                self.set("Members", v.members.len() as i64, "Count");
                self.set("Voters", voters as i64, "Count");
                self.set("Learners", v.learners().count() as i64, "Count");
                self.set("HealthyVoters", healthy as i64, "Count");
                self.set(
                    "QuorumMargin",
                    healthy as i64 - quorum(voters) as i64,
                    "Count",
                );
                let max = |f: fn(&crate::model::MemberStatus) -> u64| {
                    v.statuses.values().map(f).max().unwrap_or(0) as i64
                };
                self.set("DbSizeBytes", max(|s| s.db_size), "Bytes");
                self.set("DbSizeInUseBytes", max(|s| s.db_size_in_use), "Bytes");
                self.set("NospaceAlarm", i64::from(v.nospace()), "Count");
            }
            // A cluster that once served and now answers for nothing has no margin at all.
            ClusterState::Unreachable { .. } if obs.published.cluster.is_some() => {
                self.set("Members", 0, "Count");
                self.set("HealthyVoters", 0, "Count");
                self.set("QuorumMargin", -1, "Count");
            }
            ClusterState::Unreachable { .. } => {}
        }
    }

    /// The EMF line: `_aws` metadata naming every metric, the dimension, and the values.
    pub fn emf(&self, cluster: &str, timestamp_ms: u64) -> String {
        let definitions: Vec<Value> = self
            .0
            .iter()
            .map(|(name, (_, unit))| json!({"Name": name, "Unit": unit}))
            .collect();
        let mut line = Map::new();
        line.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [["ClusterName"]],
                    "Metrics": definitions,
                }],
            }),
        );
        line.insert("ClusterName".into(), json!(cluster));
        for (name, (value, _)) in &self.0 {
            line.insert(name.clone(), json!(value));
        }
        Value::Object(line).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterView, Instance, Member, MemberId, MemberStatus};

    fn voter(n: u64) -> Member {
        Member {
            id: MemberId(n),
            name: format!("i-{n}"),
            peer_urls: vec![],
            client_urls: vec![],
            is_learner: false,
        }
    }

    /// Three voters, one of them down, and a launch held for a minute.
    fn observation() -> Observation {
        let members = vec![voter(1), voter(2), voter(3)];
        Observation {
            desired_capacity: 3,
            instances: vec![Instance {
                id: "i-4".into(),
                arn: "arn:aws:ec2:us-east-1:123456789012:instance/i-4".into(),
                state: LifecycleState::PendingWait,
                address: None,
                launched_at: 940,
                healthy: true,
                zone: None,
                etcd_version: None,
            }],
            cluster: ClusterState::Known(Box::new(ClusterView {
                cluster_id: 1,
                healthy: [MemberId(1), MemberId(2)].into(),
                statuses: [(
                    MemberId(1),
                    MemberStatus {
                        db_size: 300,
                        db_size_in_use: 100,
                        ..Default::default()
                    },
                )]
                .into(),
                members,
                leader: Some(MemberId(1)),
                endpoint: String::new(),
                alarms: vec![],
                history_compacted: false,
                auth_enabled: false,
                root_refused: None,
                token_kinds: vec![],
                cluster_version: None,
                peer_connected: Default::default(),
                defragmented: Default::default(),
            })),
            now: 1000,
            ..Observation::for_tests()
        }
    }

    #[test]
    fn the_state_of_a_cluster_with_a_member_down_and_a_hold() {
        let obs = observation();
        let m = Metrics::observed(&obs, &[]);
        assert_eq!(
            m.get("MemberCertDaysLeft"),
            None,
            "no certificates: no figure"
        );
        let mut with_certs = obs.clone();
        let certs = &mut with_certs.published.cert_not_after;
        certs.insert("i-4".into(), 1000 + 30 * 86_400 + 5);
        certs.insert("i-gone".into(), 1000 - 86_400); // its instance left: not counted
        assert_eq!(
            Metrics::observed(&with_certs, &[]).get("MemberCertDaysLeft"),
            Some(30)
        );
        assert_eq!(m.get("Voters"), Some(3));
        assert_eq!(m.get("HealthyVoters"), Some(2));
        assert_eq!(m.get("QuorumMargin"), Some(0));
        assert_eq!(m.get("InstancesHeld"), Some(1));
        assert_eq!(m.get("OldestLaunchHoldSeconds"), Some(60));
        assert_eq!(m.get("DbSizeBytes"), Some(300));
        assert_eq!(m.get("DbSizeInUseBytes"), Some(100));
    }

    #[test]
    fn every_metric_a_wait_feeds_is_counted() {
        let obs = observation();
        // Every metric a wait feeds (`Wait::feeds`) is one this sets, counting it: a name
        // misspelt there would count nothing.
        let waits = [
            Wait::VersionGate {
                instance: "i-4".into(),
                why: "floor".into(),
            },
            Wait::VersionUnknown {
                instance: "i-4".into(),
            },
            Wait::NoRestorableBackup {
                instance: "i-4".into(),
                seed_version: "3.5".into(),
                backup: "k".into(),
                needs: "3.6".into(),
            },
            Wait::ReplacementSuspended {
                instance: "i-4".into(),
                processes: vec!["ReplaceUnhealthy".into()],
            },
            Wait::MemberUnreachableFromFunction {
                instance: "i-3".into(),
                member: MemberId(3),
                down_secs: 60,
            },
            Wait::LiveDataOverQuota {
                in_use: 2,
                quota: 1,
            },
            Wait::QuorumGuard {
                member: MemberId(2),
                instance: Some("i-2".into()),
                blocking: vec![MemberId(3)],
            },
        ];
        let fed = Metrics::observed(&obs, &waits);
        assert_eq!(fed.get("VersionGated"), Some(3));
        for w in &waits {
            assert!(!w.feeds().is_empty(), "{w} feeds a metric");
            for name in w.feeds() {
                assert!(
                    fed.get(name) >= Some(1),
                    "{w} feeds {name}, which is not counted"
                );
            }
        }
    }

    #[test]
    fn the_emf_line_declares_every_value_under_the_namespace_and_dimension() {
        let mut m = Metrics::default();
        m.count("StepsApplied.add-learner");
        m.count("StepsApplied.add-learner");
        m.set("QuorumMargin", 1, "Count");
        let line: Value = serde_json::from_str(&m.emf("prod", 1_800_000_000_000)).unwrap();
        assert_eq!(line["ClusterName"], "prod");
        assert_eq!(line["StepsApplied.add-learner"], 2);
        assert_eq!(line["QuorumMargin"], 1);
        let cw = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], NAMESPACE);
        assert_eq!(cw["Dimensions"], json!([["ClusterName"]]));
        let names: Vec<&str> = cw["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["Name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["QuorumMargin", "StepsApplied.add-learner"]);
        assert_eq!(line["_aws"]["Timestamp"], 1_800_000_000_000u64);
    }
}
