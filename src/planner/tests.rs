//! The planner's table tests: each case is one rule of mod.rs's doc, stated as given / expect,
//! in the file of the rule file it tests (`tests/record.rs` for `record.rs`, …; mod.rs's own
//! ranking in `tests/ranking.rs`; `leaving.rs`'s two rules in `tests/leaving.rs` and
//! `tests/replacements.rs`, `joining.rs`'s version gate in `tests/versions_gate.rs`). This file
//! holds what they share: the world a case is stated in (`given`, `Given`'s builder methods) and
//! its parts (`inst`, `voter`, `learner`, `running`, `backup_at`, `with_backups`, …).

use super::*;
use crate::model::*;

mod access;
mod adopt;
mod cleanup;
mod hibernate;
mod holds;
mod joining;
mod leaving;
mod ranking;
mod record;
mod recovery;
mod replacements;
mod versions_gate;

fn settings() -> Settings {
    Settings::for_tests()
}

fn arn(n: u8) -> String {
    format!("arn:aws:ec2:us-east-1:123456789012:instance/i-0000000{n}")
}

/// The voter that answers the member list in `Given::members`: where membership calls go.
const ANSWERING: &str = "http://10.0.0.1:2379";

fn addr(n: u8) -> String {
    format!("10.0.0.{n}")
}

fn peer(n: u8) -> String {
    format!("http://10.0.0.{n}:2380")
}

/// Instance `i-0000000n` at 10.0.0.n, launched at second n.
fn inst(n: u8, state: LifecycleState) -> Instance {
    Instance {
        id: format!("i-0000000{n}"),
        arn: arn(n),
        state,
        address: Some(addr(n)),
        launched_at: n as i64,
        healthy: true,
        zone: None,
        etcd_version: Some(crate::model::Version::new(3, 6, 17)),
    }
}

use LifecycleState::{InService, PendingWait, TerminatingWait};

/// A started voter on instance n, member id 100+n.
fn voter(n: u8) -> Member {
    Member {
        id: MemberId(100 + n as u64),
        name: format!("i-0000000{n}"),
        peer_urls: vec![peer(n)],
        client_urls: vec![format!("http://10.0.0.{n}:2379")],
        is_learner: false,
    }
}

fn learner(n: u8) -> Member {
    Member {
        is_learner: true,
        ..voter(n)
    }
}

fn unstarted_learner(n: u8) -> Member {
    Member {
        name: String::new(),
        client_urls: vec![],
        ..learner(n)
    }
}

fn id(n: u8) -> MemberId {
    MemberId(100 + n as u64)
}

fn i(n: u8) -> String {
    format!("i-0000000{n}")
}

struct Given {
    obs: Observation,
    /// `settings()` unless a test gives its own.
    settings: Option<Settings>,
}

fn given(instances: Vec<Instance>) -> Given {
    // As Auto Scaling keeps it after a scale-in: the instances not on their way out.
    let desired_capacity = instances
        .iter()
        .filter(|i| i.state.is_present() && i.state != LifecycleState::TerminatingWait)
        .count() as u32;
    Given {
        obs: Observation {
            instances,
            desired_capacity,
            ..Observation::for_tests()
        },
        settings: None,
    }
}

impl Given {
    /// Members all healthy, the first voter leading.
    fn members(mut self, members: Vec<Member>) -> Self {
        let leader = members.iter().find(|m| !m.is_learner).map(|m| m.id);
        let healthy = members
            .iter()
            .filter(|m| m.is_started())
            .map(|m| m.id)
            .collect();
        self.obs.cluster = ClusterState::Known(Box::new(ClusterView {
            cluster_id: 7,
            members,
            leader,
            healthy,
            endpoint: "http://10.0.0.1:2379".into(),
            statuses: Default::default(),
            alarms: vec![],
            history_compacted: false,
            auth_enabled: false,
            root_refused: None,
            token_kinds: vec![],
            cluster_version: Some(crate::model::Version::new(3, 6, 0)),
            peer_connected: Default::default(),
            defragmented: Default::default(),
        }));
        self
    }
    fn leader(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.leader = Some(id(n));
        }
        self
    }
    /// The group's desired capacity, as a test says.
    fn desired(mut self, n: u32) -> Self {
        self.obs.desired_capacity = n;
        self
    }
    fn unhealthy(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.healthy.remove(&id(n));
        }
        self
    }
    /// Member `n` does not answer the function, yet an answering member reports a raft
    /// connection to it.
    fn cut_off(mut self, n: u8) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.healthy.remove(&id(n));
            v.peer_connected.insert(id(n));
        }
        self
    }
    /// A record of a cluster that served, with the id `members` gives it.
    fn record(mut self, seed: u8) -> Self {
        self.obs.published.cluster = Some(ClusterRecord {
            state: RecordState::Served,
            cluster_id: Some(7),
            ..ClusterRecord::bootstrapping(format!("etcd-{}", i(seed)), i(seed), 1)
        });
        self
    }
    /// A record whose seed has not served yet.
    fn bootstrapping(mut self, seed: u8) -> Self {
        self.obs.published.cluster = Some(ClusterRecord::bootstrapping(
            format!("etcd-{}", i(seed)),
            i(seed),
            1,
        ));
        self
    }
    fn published(mut self, n: u8, config: MemberConfig, at: i64) -> Self {
        self.obs.published.members.insert(
            i(n),
            Published {
                config,
                published_at: at,
            },
        );
        self
    }
    /// Whatever config: for rules that only ask whether one exists.
    fn some_config(self, n: u8) -> Self {
        let c = MemberConfig {
            state: InitialState::Existing,
            ..seed_config(n)
        };
        self.published(n, c, 1)
    }
    fn plan(&self) -> Step {
        plan(&self.obs, self.settings.as_ref().unwrap_or(&settings()))
    }
    fn down_since(mut self, n: u8, at: i64) -> Self {
        self.obs.published.down_since.insert(i(n), at);
        self
    }
    fn waits(&self) -> Vec<Wait> {
        assess(&self.obs, &settings()).waits
    }
    fn survivors(mut self, survivors: Vec<Survivor>) -> Self {
        self.obs.cluster = ClusterState::Unreachable {
            detail: "no leader".into(),
            survivors,
        };
        self
    }
    /// Every member answers and says it runs `versions[k]` (by member order); the cluster
    /// version is `cluster`.
    fn versions(mut self, cluster: &str, versions: &[&str]) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.cluster_version = Some(cluster.parse().unwrap());
            for (m, version) in v.members.clone().iter().zip(versions) {
                v.statuses.insert(
                    m.id,
                    MemberStatus {
                        version: version.to_string(),
                        ..Default::default()
                    },
                );
            }
        }
        self
    }
    fn alarm(mut self, n: u8, kind: &str) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.alarms.push(Alarm {
                member: id(n),
                kind: kind.into(),
            });
        }
        self
    }
    /// Member `n` answers its status at `revision`.
    fn status(mut self, n: u8, revision: i64) -> Self {
        if let ClusterState::Known(v) = &mut self.obs.cluster {
            v.statuses.insert(
                id(n),
                MemberStatus {
                    revision,
                    version: "3.6.17".into(),
                    ..Default::default()
                },
            );
        }
        self
    }
}

fn seed_config(n: u8) -> MemberConfig {
    MemberConfig {
        name: i(n),
        initial_cluster: vec![(i(n), peer(n))],
        state: InitialState::New,
        token: format!("etcd-{}", i(n)),
        peer_url: peer(n),
        client_url: format!("http://10.0.0.{n}:2379"),
        auto_compaction_retention: "1h".into(),
        quota_backend_bytes: 2 << 30,
        snapshot_count: 10_000,
        restore: None,
        client_cert_auth: false,
        root_tokens: false,
        etcd_version: Some(crate::model::Version::new(3, 6, 17)),
        metrics_url: None,
    }
}

fn complete(n: u8, transition: Transition, result: ActionResult) -> Step {
    Step::Complete {
        instance: i(n),
        transition,
        result,
    }
}

fn unhealthy_inst(n: u8, state: LifecycleState) -> Instance {
    Instance {
        arn: arn(n),
        healthy: false,
        ..inst(n, state)
    }
}

fn with_backups(mut g: Given) -> Given {
    let mut s = settings();
    s.backup = Some(crate::config::BackupPolicy {
        interval_secs: 900,
        hourly_days: 7,
        daily_days: 90,
        recovery: crate::config::Recovery::Auto,
    });
    g.settings = Some(s);
    g
}

fn survivor(n: u8, revision: i64, voters: &[u8]) -> Survivor {
    Survivor {
        member: id(n),
        name: i(n),
        is_learner: false,
        endpoint: format!("http://10.0.0.{n}:2379"),
        cluster_id: 7,
        status: MemberStatus {
            revision,
            ..Default::default()
        },
        voters: voters.iter().map(|&v| voter(v)).collect(),
    }
}

fn backup_at(revision: i64) -> Backup {
    Backup {
        key: format!("p/etcd-i-00000001/{revision}"),
        token: format!("etcd-{}", i(1)),
        taken_at: 900,
        revision,
        size: 1,
        etcd_version: None,
    }
}

fn running(n: u8, state: LifecycleState, version: &str) -> Instance {
    Instance {
        etcd_version: version.parse().ok(),
        ..inst(n, state)
    }
}

/// A member of a cluster that ran before the stack (no instance of the group): `old-n`, id 200+n.
fn adopted(n: u8) -> Member {
    Member {
        id: MemberId(200 + n as u64),
        name: format!("old-{n}"),
        peer_urls: vec![format!("http://10.1.0.{n}:2380")],
        client_urls: vec![format!("http://10.1.0.{n}:2379")],
        is_learner: false,
    }
}

fn adopting(mut g: Given) -> Given {
    let mut s = settings();
    s.adopt = vec!["http://10.1.0.1:2379".into()];
    g.settings = Some(s);
    g
}

/// A fit cluster of three old members (`adopted`), the group's three instances launching.
fn fit_for_adoption() -> Given {
    adopting(
        given((1..=3).map(|n| inst(n, PendingWait)).collect())
            .members((1..=3).map(adopted).collect()),
    )
}

fn view_mut(g: &mut Given) -> &mut ClusterView {
    match &mut g.obs.cluster {
        ClusterState::Known(v) => v,
        _ => panic!("no cluster"),
    }
}
