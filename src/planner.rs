//! The decision: from one observation, the next safe step. Pure: no I/O, no clock.
//!
//! Rules, in the order they are tried (the first that has something to do wins; a rule that can
//! only wait lets later rules act, and every wait is reported):
//! 0. keep the cluster record true: note that the cluster served (with its id), and never believe
//!    a cluster whose id differs from the record's;
//! 1. bootstrap exactly once, when no member answers (create-only cluster record, then the seed);
//!    a seed that never serves is abandoned after the start timeout, and a record whose seed
//!    never served and is gone is replaced (conditionally) with a new seed. A record that served
//!    is never replaced;
//! 2. remove members that must go (a terminating instance's, one whose instance left the group),
//!    **unhealthy ones first**, each only while the healthy voters left keep a quorum (moving
//!    leadership away first); a blocked removal holds its terminate hook. The last voter leaves
//!    only after a replacement has joined and been promoted;
//! 3. complete launch actions of started voters (CONTINUE), and of instances whose learner was
//!    removed (ABANDON, so the group replaces them);
//! 4. the one learner: publish its config, promote it once started, remove it if it never starts;
//! 5. join the next instance as a learner, only when no learner exists and every voter started;
//!    never over a member of another instance that holds the same peer URL;
//! 6. a voter whose etcd has been down `unhealthy_replace_secs` while its instance is in service
//!    is replaced (the group's health is set to Unhealthy), one at a time, while the others keep a
//!    quorum; never while an answering member still holds a raft connection to it (down for the
//!    function only);
//! 7. delete published configs and down-marks of instances that are gone or well again.

use crate::config::Settings;
use crate::model::{
    ActionResult, Alarm, Backup, ClusterRecord, ClusterState, ClusterView, InitialState, Instance,
    LifecycleState, Member, MemberConfig, MemberId, Observation, RecordState, Survivor, Timestamp,
    Transition,
};

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Step {
    CreateCluster(ClusterRecord),
    /// Replace `old`, whose seed never served, with `new`: only if `old` is still the record.
    ReseedCluster {
        old: ClusterRecord,
        new: ClusterRecord,
    },
    /// Rewrite the record as having served, with the cluster's id.
    MarkServed(ClusterRecord),
    Publish {
        instance: String,
        config: MemberConfig,
    },
    AddLearner {
        instance: String,
        peer_url: String,
    },
    Promote {
        instance: String,
        member: MemberId,
    },
    TransferLeadership {
        from: MemberId,
        to: MemberId,
        leader_endpoint: String,
    },
    RemoveMember {
        member: MemberId,
        instance: Option<String>,
        reason: Removal,
    },
    Unpublish {
        instance: String,
    },
    Complete {
        instance: String,
        transition: Transition,
        result: ActionResult,
    },
    /// Remember when this in-service instance's etcd was first seen not answering.
    NoteDown {
        instance: String,
        since: Timestamp,
    },
    /// Its etcd answers again, or it left: forget the mark.
    ForgetDown {
        instance: String,
    },
    /// Have the group replace an instance (SetInstanceHealth Unhealthy), through its hooks.
    Replace {
        instance: String,
        why: Replacement,
    },
    /// Maintenance (`crate::maintenance`): compact the history up to `revision`.
    Compact {
        revision: i64,
    },
    /// Defragment one member, through its own client URL.
    Defragment {
        member: MemberId,
        endpoint: String,
    },
    /// Deactivate an alarm once its cause is gone.
    Disarm(Alarm),
    /// Turn etcd's authentication on (ETCD_AUTH=on): the cluster serves and it is off.
    EnableAuth,
    /// Stream a snapshot of `member` into the backup store.
    Backup {
        member: MemberId,
        endpoint: String,
        reason: crate::backup::Reason,
    },
    /// Delete a backup retention lets go.
    Prune {
        key: String,
    },
    /// The cluster that served is lost for good (every member gone, or a majority gone and the
    /// survivors' data saved): start a new generation from `backup`, seeded by `seed` (replacing
    /// `old`, once).
    Restore {
        old: ClusterRecord,
        seed: String,
        token: String,
        backup: Backup,
    },
    Wait(Wait),
    Idle,
}

/// Why an in-service instance is replaced.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Replacement {
    /// Its voter's etcd has been down this long.
    Down { member: MemberId, down_secs: i64 },
    /// It survived a cluster that was restored into a new generation: its etcd serves the old
    /// one (config of `token`), and a fresh instance joins the new one in its place.
    OldGeneration { token: String },
    /// TLS=managed: its member certificate has less than a third of its life left; a fresh
    /// instance gets a fresh certificate (no reload in place).
    CertificateExpiring { not_after: Timestamp },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Removal {
    Terminating,
    LearnerNeverStarted,
    InstanceGone,
    /// Its etcd is down and its instance is marked Unhealthy: the group replaces it, possibly
    /// launching the replacement first, which cannot join while the dead member counts.
    Replaced,
}

/// Work remains, but no step is safe or useful right now.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Wait {
    SeedStarting {
        instance: String,
    },
    LearnerStarting {
        instance: String,
    },
    /// A cluster record exists but no member answers: never bootstrap again, change nothing.
    ClusterUnreachable {
        detail: String,
    },
    /// A record that never served, whose seed is gone, and no launching instance to seed anew.
    NoSeed,
    /// Every member is gone and RECOVERY=manual: waiting for `<prefix>/restore-request`.
    AwaitRestoreRequest,
    /// Removing this member now would leave fewer healthy voters than a quorum; `instance` is held
    /// in its terminate hook meanwhile, `blocking` are the voters whose etcd is down.
    QuorumGuard {
        member: MemberId,
        instance: Option<String>,
        blocking: Vec<MemberId>,
    },
    VoterNotStarted {
        member: MemberId,
    },
    /// The last voter's instance is held until `replacement` has joined and been promoted.
    LastVoterHeld {
        instance: String,
        replacement: String,
    },
    /// The last voter is leaving and no replacement is listed yet, but the group's desired
    /// capacity says one is coming: held (heartbeats) until it is listed, then `LastVoterHeld`.
    LastVoterAwaitsReplacement {
        instance: String,
        desired_capacity: u32,
    },
    /// A voter does not answer, and etcd refuses every add until it answers or is removed.
    JoinBlocked {
        member: MemberId,
    },
    /// A started member of another instance holds this instance's peer URL (a reused address):
    /// it must be removed before this instance can join.
    PeerUrlTaken {
        instance: String,
        member: MemberId,
    },
    /// A voter's etcd is down while its instance is in service; replaced once down long enough
    /// and only while the other voters keep a quorum.
    MemberDown {
        instance: String,
        member: MemberId,
        down_secs: i64,
    },
    /// A voter the function cannot reach, but to which an answering member reports an active
    /// raft connection: down for the function only (a route, an ACL, an ENI problem). Never
    /// replaced on the function's view alone; a replacement in the same place could look down
    /// again, a loop at quorum margin zero.
    MemberUnreachableFromFunction {
        instance: String,
        member: MemberId,
        down_secs: i64,
    },
    /// The observation still calls for a step this invocation has just applied (AWS is
    /// eventually consistent: a completed action can show a while longer): a later invocation
    /// sees it done.
    NotYetVisible {
        step: &'static str,
        instance: Option<String>,
    },
    /// NOSPACE: history compacted and every member defragmented, and the live data alone still
    /// fills the backend quota. Disarming would only alarm again: data must be deleted.
    LiveDataOverQuota {
        in_use: u64,
        quota: u64,
    },
    /// etcd refused a step with an answer that means "not yet" (a member down, the learner not in
    /// sync, too few started members) for longer than this invocation could wait.
    Refused {
        step: &'static str,
        instance: Option<String>,
        refusal: String,
    },
}

impl Wait {
    /// Whether this wait usually ends within seconds (a process starting), so an invocation may
    /// poll for it; others (a dead member, a replacement) take minutes and are left to the schedule.
    pub fn is_short(&self) -> bool {
        matches!(
            self,
            Self::SeedStarting { .. }
                | Self::LearnerStarting { .. }
                | Self::VoterNotStarted { .. }
                | Self::LastVoterHeld { .. }
                | Self::LastVoterAwaitsReplacement { .. }
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::SeedStarting { .. } => "seed-starting",
            Self::LearnerStarting { .. } => "learner-starting",
            Self::ClusterUnreachable { .. } => "cluster-unreachable",
            Self::NoSeed => "no-seed",
            Self::AwaitRestoreRequest => "await-restore-request",
            Self::QuorumGuard { .. } => "quorum-guard",
            Self::VoterNotStarted { .. } => "voter-not-started",
            Self::LastVoterHeld { .. } => "last-voter-held",
            Self::LastVoterAwaitsReplacement { .. } => "last-voter-awaits-replacement",
            Self::PeerUrlTaken { .. } => "peer-url-taken",
            Self::JoinBlocked { .. } => "join-blocked",
            Self::MemberDown { .. } => "member-down",
            Self::MemberUnreachableFromFunction { .. } => "member-unreachable-from-function",
            Self::NotYetVisible { .. } => "not-yet-visible",
            Self::Refused { .. } => "refused-for-now",
            Self::LiveDataOverQuota { .. } => "live-data-over-quota",
        }
    }
}

/// The next step, and every wait a rule reported on the way: what `plan` would say and why.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Plan {
    pub step: Step,
    pub waits: Vec<Wait>,
}

impl Step {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateCluster(_) => "create-cluster",
            Self::ReseedCluster { .. } => "reseed-cluster",
            Self::MarkServed(_) => "mark-served",
            Self::Publish { .. } => "publish-config",
            Self::AddLearner { .. } => "add-learner",
            Self::Promote { .. } => "promote",
            Self::TransferLeadership { .. } => "transfer-leadership",
            Self::RemoveMember { .. } => "remove-member",
            Self::Unpublish { .. } => "unpublish-config",
            Self::Complete { .. } => "complete-lifecycle-action",
            Self::NoteDown { .. } => "note-down",
            Self::ForgetDown { .. } => "forget-down",
            Self::Replace { .. } => "replace-instance",
            Self::Compact { .. } => "compact",
            Self::Defragment { .. } => "defragment",
            Self::Disarm(_) => "disarm-alarm",
            Self::EnableAuth => "enable-auth",
            Self::Backup { .. } => "backup",
            Self::Prune { .. } => "prune-backup",
            Self::Restore { .. } => "restore",
            Self::Wait(_) => "wait",
            Self::Idle => "idle",
        }
    }

    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::CreateCluster(r) | Self::MarkServed(r) => Some(&r.seed),
            Self::ReseedCluster { new, .. } => Some(&new.seed),
            Self::Restore { seed, .. } => Some(seed),
            Self::Publish { instance, .. }
            | Self::AddLearner { instance, .. }
            | Self::Promote { instance, .. }
            | Self::Unpublish { instance }
            | Self::Complete { instance, .. }
            | Self::NoteDown { instance, .. }
            | Self::ForgetDown { instance }
            | Self::Replace { instance, .. } => Some(instance),
            Self::RemoveMember { instance, .. } => instance.as_deref(),
            Self::Wait(w) => w.instance(),
            _ => None,
        }
    }

    pub fn member(&self) -> Option<MemberId> {
        match self {
            Self::Promote { member, .. }
            | Self::RemoveMember { member, .. }
            | Self::Defragment { member, .. }
            | Self::Backup { member, .. } => Some(*member),
            Self::Disarm(a) => Some(a.member),
            Self::Replace {
                why: Replacement::Down { member, .. },
                ..
            } => Some(*member),
            Self::TransferLeadership { from, .. } => Some(*from),
            Self::Wait(w) => w.member(),
            _ => None,
        }
    }
}

impl Wait {
    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::SeedStarting { instance }
            | Self::LearnerStarting { instance }
            | Self::LastVoterHeld { instance, .. }
            | Self::LastVoterAwaitsReplacement { instance, .. }
            | Self::PeerUrlTaken { instance, .. }
            | Self::MemberDown { instance, .. }
            | Self::MemberUnreachableFromFunction { instance, .. } => Some(instance),
            Self::QuorumGuard { instance, .. }
            | Self::NotYetVisible { instance, .. }
            | Self::Refused { instance, .. } => instance.as_deref(),
            _ => None,
        }
    }

    pub fn member(&self) -> Option<MemberId> {
        match self {
            Self::QuorumGuard { member, .. }
            | Self::VoterNotStarted { member }
            | Self::JoinBlocked { member }
            | Self::PeerUrlTaken { member, .. }
            | Self::MemberDown { member, .. }
            | Self::MemberUnreachableFromFunction { member, .. } => Some(*member),
            _ => None,
        }
    }
}

/// The smallest number of voters that is a majority of `n`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

pub fn plan(obs: &Observation, settings: &Settings) -> Step {
    assess(obs, settings).step
}

/// The next step and every wait found on the way to it.
pub fn assess(obs: &Observation, settings: &Settings) -> Plan {
    let view = match &obs.cluster {
        ClusterState::Unreachable { detail, survivors } => {
            return without_cluster(obs, settings, detail, survivors)
        }
        ClusterState::Known(view) => view,
    };
    let p = Planner {
        obs,
        settings,
        view,
    };
    if let Some(step) = record_bookkeeping(obs, view).or_else(|| p.forget_recovered()) {
        return match step {
            Step::Wait(w) => waiting(w),
            step => stepping(step),
        };
    }
    // Every rule is a cheap pure function: evaluating all keeps the priority order plain.
    let candidates = [
        p.removals(),
        p.launch_completions(),
        p.learner(),
        p.joins(),
        p.replacements(),
        p.cleanup(),
    ];
    let mut waits = Vec::new();
    for steps in candidates {
        for step in steps {
            match step {
                Step::Wait(w) => waits.push(w),
                step => return Plan { step, waits },
            }
        }
    }
    // Access and maintenance rank below membership: only when membership has nothing to do or
    // wait for. Access first: a one-off, and without it every certificate holder reaches all.
    if waits.is_empty() {
        if let Some(step) = p.access() {
            return stepping(step);
        }
        if let Some(step) = crate::maintenance::plan(view, settings).into_iter().next() {
            return match step {
                Step::Wait(w) => waiting(w),
                step => stepping(step),
            };
        }
    }
    // Backups: whenever membership has no step to take (a wait, such as a held termination,
    // is when a fresh snapshot matters most).
    if let Some(step) = p.scheduled_backup().or_else(|| p.prune()) {
        return Plan { step, waits };
    }
    // A short wait (something starting) is what an invocation may poll for: report it first.
    let step = waits
        .iter()
        .find(|w| w.is_short())
        .or(waits.first())
        .map_or(Step::Idle, |w| Step::Wait(w.clone()));
    Plan { step, waits }
}

/// Rule 0: the record says whether the cluster served and which cluster it is.
fn record_bookkeeping(obs: &Observation, view: &ClusterView) -> Option<Step> {
    let record = obs.published.cluster.as_ref()?;
    if let Some(id) = record.cluster_id.filter(|&id| id != view.cluster_id) {
        // The members port already skips such endpoints; this is the planner's own guard.
        return Some(Step::Wait(Wait::ClusterUnreachable {
            detail: format!(
                "the answering member belongs to cluster {:x}, the record's is {id:x}",
                view.cluster_id
            ),
        }));
    }
    if !(record.has_served() && record.cluster_id.is_some()) {
        // Served: the seed is a started voter of the cluster that answers.
        let seed_serves = view
            .voters()
            .any(|m| m.is_started() && m.name == record.seed);
        if record.has_served() || seed_serves {
            return Some(Step::MarkServed(ClusterRecord {
                state: RecordState::Served,
                cluster_id: Some(view.cluster_id),
                ..record.clone()
            }));
        }
        return None;
    }
    // Once it served, the seed's config never says `new` again: if the seed lost its data it
    // would bootstrap a one-member cluster with the very same member and cluster ids. With
    // `existing` and nobody else listed, such an etcd refuses to start instead.
    // Only for a seed still in the group: a vanished seed's config is cleanup's to delete (and
    // a certificate could not be issued for an instance without an address).
    obs.instance(&record.seed)
        .filter(|i| i.state.is_present())?;
    let seed_config = obs.published.members.get(&record.seed)?;
    let needs_rewrite =
        seed_config.config.state == InitialState::New || seed_config.config.restore.is_some();
    needs_rewrite.then(|| Step::Publish {
        instance: record.seed.clone(),
        config: MemberConfig {
            state: InitialState::Existing,
            // Restoring again would found a second copy of the cluster.
            restore: None,
            ..seed_config.config.clone()
        },
    })
}

/// Instances held in a lifecycle hook, whose heartbeat keeps the hook from timing out while a
/// slow step is under way.
pub fn held(obs: &Observation) -> Vec<(String, Transition)> {
    obs.instances
        .iter()
        .filter_map(|i| match i.state {
            LifecycleState::PendingWait => Some((i.id.clone(), Transition::Launch)),
            LifecycleState::TerminatingWait => Some((i.id.clone(), Transition::Terminate)),
            _ => None,
        })
        .collect()
}

/// With no quorum: the terminating instances that a member still answering lists as a voter.
/// Their disks may hold acknowledged writes the answering members lack, so their hooks are kept
/// alive (heartbeats) instead of lapsing into a termination on a guess.
pub fn held_while_unreachable(obs: &Observation) -> Vec<String> {
    let ClusterState::Unreachable { survivors, .. } = &obs.cluster else {
        return vec![];
    };
    obs.instances
        .iter()
        .filter(|i| i.state == LifecycleState::TerminatingWait)
        .filter(|i| {
            survivors
                .iter()
                .any(|s| s.voters.iter().any(|v| v.name == i.id))
        })
        .map(|i| i.id.clone())
        .collect()
}

fn by_age(instances: &[Instance]) -> Vec<&Instance> {
    let mut v: Vec<&Instance> = instances.iter().collect();
    v.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
    v
}

/// The oldest launching, healthy instance with an address: every racing invocation picks the same.
fn seed_candidate<'a>(obs: &'a Observation, except: Option<&str>) -> Option<&'a Instance> {
    by_age(&obs.instances).into_iter().find(|i| {
        i.state.is_launching() && i.healthy && i.address.is_some() && Some(i.id.as_str()) != except
    })
}

fn waiting(w: Wait) -> Plan {
    Plan {
        step: Step::Wait(w.clone()),
        waits: vec![w],
    }
}

fn stepping(step: Step) -> Plan {
    Plan {
        step,
        waits: vec![],
    }
}

fn without_cluster(
    obs: &Observation,
    settings: &Settings,
    detail: &str,
    survivors: &[Survivor],
) -> Plan {
    let unreachable = || {
        waiting(Wait::ClusterUnreachable {
            detail: detail.to_string(),
        })
    };
    let Some(record) = &obs.published.cluster else {
        // No record and nobody answering: a brand-new cluster. The create-only write decides.
        // Only a launching instance may seed: one in service may run etcd we cannot reach.
        return seed_candidate(obs, None).map_or(stepping(Step::Idle), |seed| {
            stepping(Step::CreateCluster(ClusterRecord::bootstrapping(
                format!("{}-{}", settings.cluster_name, seed.id),
                seed.id.clone(),
                obs.now,
            )))
        });
    };
    if record.has_served() {
        // Never bootstrap over a cluster that served, unless it is lost for good (every member
        // gone, or a majority gone with the survivors' data saved first) and
        // a backup brings its data back.
        let Some(policy) = settings.backup.as_ref() else {
            return unreachable();
        };
        // Whether there is a backup, and which is freshest, is unknown: restore nothing on a
        // guess (and take no survivor's snapshot into a store that fails).
        if let Some(why) = &obs.backups_failing {
            return waiting(Wait::ClusterUnreachable {
                detail: format!("{detail}; the backup store fails ({why}): nothing is restored"),
            });
        }
        if !crate::backup::every_member_gone(obs) {
            let Some(survivor) = crate::backup::quorum_lost_for_good(
                obs,
                survivors,
                record.cluster_id,
                &record.token,
            ) else {
                return unreachable();
            };
            // The survivor's data first, when no backup of this generation is as new.
            let newer = crate::backup::latest(&obs.backups, &record.token)
                .is_none_or(|b| b.revision < survivor.status.revision);
            if newer {
                return stepping(Step::Backup {
                    member: survivor.member,
                    endpoint: survivor.endpoint.clone(),
                    reason: crate::backup::Reason::Survivor,
                });
            }
        }
        let Some(seed) = seed_candidate(obs, None) else {
            return waiting(Wait::ClusterUnreachable {
                detail: format!(
                    "the cluster is lost for good; a launching instance will seed its restore \
                     ({detail})"
                ),
            });
        };
        return match crate::backup::choose(obs, policy) {
            crate::backup::Choice::Restore(backup) => stepping(Step::Restore {
                old: record.clone(),
                seed: seed.id.clone(),
                token: format!("{}-{}", settings.cluster_name, seed.id),
                backup,
            }),
            crate::backup::Choice::AwaitRequest => waiting(Wait::AwaitRestoreRequest),
            crate::backup::Choice::NoBackup => waiting(Wait::ClusterUnreachable {
                detail: format!(
                    "every member is gone and there is no backup to restore ({detail})"
                ),
            }),
        };
    }
    // Bootstrap is under way only while the seed is still held at launch: its action completes
    // once it is a started voter (and the record says served), so a seed in service with a
    // record that never served is a cluster we cannot see. Publishing `new` could found a second.
    if let Some(step) = release_terminations(obs) {
        return stepping(step);
    }
    let seed = obs.instance(&record.seed);
    if seed.is_some_and(|i| !i.state.is_launching() && i.state.wants_membership()) {
        return unreachable();
    }
    match seed.filter(|i| i.state.is_launching() && i.healthy) {
        Some(seed) => {
            let Some(address) = seed.address.as_deref() else {
                return waiting(Wait::SeedStarting {
                    instance: seed.id.clone(),
                });
            };
            let t = &settings.topology;
            let initial_cluster = vec![(seed.id.clone(), t.peer_url(address))];
            let token = record.token.clone();
            let config = MemberConfig {
                restore: record.restored_from.as_ref().map(|r| r.snapshot.clone()),
                ..t.member_config(&seed.id, address, initial_cluster, InitialState::New, token)
            };
            match obs.published.members.get(&seed.id) {
                Some(p) if p.config == config => {
                    if obs.now - p.published_at > settings.learner_start_timeout_secs {
                        // A seed that never serves is abandoned like a learner; the record is
                        // then re-seeded from another instance.
                        stepping(Step::Complete {
                            instance: seed.id.clone(),
                            transition: Transition::Launch,
                            result: ActionResult::Abandon,
                        })
                    } else {
                        waiting(Wait::SeedStarting {
                            instance: seed.id.clone(),
                        })
                    }
                }
                _ => stepping(Step::Publish {
                    instance: seed.id.clone(),
                    config,
                }),
            }
        }
        // The seed never served and is gone (or leaving): choose another, conditionally.
        None => match seed_candidate(obs, Some(&record.seed)) {
            Some(next) => stepping(Step::ReseedCluster {
                old: record.clone(),
                new: ClusterRecord {
                    restored_from: record.restored_from.clone(),
                    ..ClusterRecord::bootstrapping(
                        format!("{}-{}", settings.cluster_name, next.id),
                        next.id.clone(),
                        obs.now,
                    )
                },
            }),
            None => waiting(Wait::NoSeed),
        },
    }
}

/// With no cluster that ever served, a leaving instance has no member to remove: let it go
/// (unpublishing its config first).
fn release_terminations(obs: &Observation) -> Option<Step> {
    let leaving = by_age(&obs.instances)
        .into_iter()
        .find(|i| i.state == LifecycleState::TerminatingWait)?;
    Some(if obs.published.members.contains_key(&leaving.id) {
        Step::Unpublish {
            instance: leaving.id.clone(),
        }
    } else {
        Step::Complete {
            instance: leaving.id.clone(),
            transition: Transition::Terminate,
            result: ActionResult::Continue,
        }
    })
}

struct Planner<'a> {
    obs: &'a Observation,
    settings: &'a Settings,
    view: &'a ClusterView,
}

/// A member that has to go, and why.
struct Leaving<'a> {
    member: &'a Member,
    instance: Option<&'a Instance>,
    reason: Removal,
}

impl<'a> Planner<'a> {
    fn peer_url(&self, i: &Instance) -> Option<String> {
        i.address
            .as_deref()
            .map(|a| self.settings.topology.peer_url(a))
    }

    /// A started member is its instance by name alone: an address can be reused by a new
    /// instance after its old one died. Only a member that has not started yet (and so has no
    /// name) is known by the peer URL it was added with.
    fn matches(&self, m: &Member, i: &Instance) -> bool {
        if m.is_started() {
            m.name == i.id
        } else {
            self.peer_url(i).is_some_and(|u| m.peer_urls.contains(&u))
        }
    }

    fn member_of(&self, i: &Instance) -> Option<&'a Member> {
        self.view.members.iter().find(|m| self.matches(m, i))
    }

    fn instance_of(&self, m: &Member) -> Option<&'a Instance> {
        self.obs.instances.iter().find(|i| self.matches(m, i))
    }

    fn healthy(&self, m: &Member) -> bool {
        self.view.healthy.contains(&m.id)
    }

    /// Voters other than `m` whose etcd answered.
    fn healthy_voters_but(&self, m: MemberId) -> usize {
        self.view
            .voters()
            .filter(|v| v.id != m && self.view.healthy.contains(&v.id))
            .count()
    }

    /// etcd's own rule (`--strict-reconfig-check`): a voter may go when the voters that stay and
    /// answer are a quorum of the voters that stay. A learner may always go.
    fn removal_keeps_quorum(&self, m: &Member) -> bool {
        if m.is_learner {
            return true;
        }
        let staying = self.view.voters().count() - 1;
        staying >= 1 && self.healthy_voters_but(m.id) >= quorum(staying)
    }

    fn down_voters(&self) -> Vec<MemberId> {
        self.view
            .voters()
            .filter(|v| !self.healthy(v))
            .map(|v| v.id)
            .collect()
    }

    /// Rule 2: every member that must go, the unhealthy ones first (removing a dead member only
    /// restores the quorum's margin), then leaving instances by age, then orphans.
    fn removals(&self) -> Vec<Step> {
        let mut out = Vec::new();
        let mut leaving: Vec<Leaving> = Vec::new();
        for i in by_age(&self.obs.instances)
            .into_iter()
            .filter(|i| i.state == LifecycleState::TerminatingWait)
        {
            let Some(m) = self.member_of(i) else {
                out.push(if self.obs.published.members.contains_key(&i.id) {
                    Step::Unpublish {
                        instance: i.id.clone(),
                    }
                } else {
                    Step::Complete {
                        instance: i.id.clone(),
                        transition: Transition::Terminate,
                        result: ActionResult::Continue,
                    }
                });
                continue;
            };
            if !m.is_learner && self.view.voters().count() == 1 {
                // The last voter: replace before remove. With a replacement on its way, hold the
                // instance until it has joined and been promoted; with none and a desired
                // capacity of 0 (the group scaled to zero), the cluster ends with it.
                // (Its address may not be known yet: it is a replacement all the same.)
                let replacement = by_age(&self.obs.instances)
                    .into_iter()
                    .find(|r| r.id != i.id && r.state.wants_membership() && r.healthy);
                out.push(match replacement {
                    Some(r) => Step::Wait(Wait::LastVoterHeld {
                        instance: i.id.clone(),
                        replacement: r.id.clone(),
                    }),
                    // The group still wants instances: a replacement is coming even if it is not
                    // listed yet (Auto Scaling launches it once this one is on its way out, and
                    // its DescribeAutoScalingGroups is eventually consistent). Ending the only
                    // voter now would lose the cluster.
                    None if self.obs.desired_capacity > 0 => {
                        Step::Wait(Wait::LastVoterAwaitsReplacement {
                            instance: i.id.clone(),
                            desired_capacity: self.obs.desired_capacity,
                        })
                    }
                    None if self.obs.published.members.contains_key(&i.id) => Step::Unpublish {
                        instance: i.id.clone(),
                    },
                    None => Step::Complete {
                        instance: i.id.clone(),
                        transition: Transition::Terminate,
                        result: ActionResult::Continue,
                    },
                });
                continue;
            }
            leaving.push(Leaving {
                member: m,
                instance: Some(i),
                reason: Removal::Terminating,
            });
        }
        let mut voters: Vec<&Member> = self.view.voters().collect();
        voters.sort_by_key(|m| m.id);
        for m in voters {
            let instance = self.instance_of(m);
            if instance.is_none_or(|i| !i.state.is_present()) {
                leaving.push(Leaving {
                    member: m,
                    instance,
                    reason: Removal::InstanceGone,
                });
            } else if instance.is_some_and(|i| {
                !i.healthy && i.state != LifecycleState::TerminatingWait && !self.healthy(m)
            }) {
                // Removing a dead voter never lowers the failures the cluster tolerates.
                leaving.push(Leaving {
                    member: m,
                    instance,
                    reason: Removal::Replaced,
                });
            }
        }
        // Stable: within the same health, the order above (leaving by age, then orphans by id).
        leaving.sort_by_key(|l| self.healthy(l.member));
        for l in &leaving {
            if !self.removal_keeps_quorum(l.member) {
                out.push(Step::Wait(Wait::QuorumGuard {
                    member: l.member.id,
                    instance: l
                        .instance
                        .filter(|i| i.state == LifecycleState::TerminatingWait)
                        .map(|i| i.id.clone()),
                    blocking: self.down_voters(),
                }));
                continue;
            }
            // A healthy member leaves only behind a fresh snapshot; a dead one never waits.
            let m = l.member;
            if self.healthy(m) && !m.is_learner {
                if let Some(step) = self.backup_before_removal() {
                    out.push(step);
                    continue;
                }
            }
            // Only a leader that answers can hand over; a hung one loses leadership to an
            // election anyway, and the removal goes to another member.
            if self.view.leader == Some(m.id) && !m.is_learner && self.healthy(m) {
                if let (Some(to), Some(endpoint)) = (self.transferee(m.id), m.client_urls.first()) {
                    out.push(Step::TransferLeadership {
                        from: m.id,
                        to,
                        leader_endpoint: endpoint.clone(),
                    });
                    continue;
                }
            }
            out.push(Step::RemoveMember {
                member: m.id,
                instance: l.instance.map(|i| i.id.clone()),
                reason: l.reason,
            });
        }
        // Action steps before waits, in the order found.
        out.sort_by_key(|s| matches!(s, Step::Wait(_)));
        out
    }

    fn token(&self) -> String {
        self.obs
            .published
            .cluster
            .as_ref()
            .map_or_else(|| self.settings.cluster_name.clone(), |r| r.token.clone())
    }

    fn backup_step(&self, reason: crate::backup::Reason) -> Option<Step> {
        let (member, endpoint) = crate::backup::source(self.view)?;
        Some(Step::Backup {
            member,
            endpoint,
            reason,
        })
    }

    /// Best effort: while the store fails the member is removed without (README, Backups).
    fn backup_before_removal(&self) -> Option<Step> {
        self.settings.backup.as_ref()?;
        if self.obs.backups_failing.is_some() {
            return None;
        }
        let stale =
            crate::backup::stale_for_removal(&self.obs.backups, &self.token(), self.obs.now);
        stale
            .then(|| self.backup_step(crate::backup::Reason::BeforeRemoval))
            .flatten()
    }

    /// ETCD_AUTH=on: turn etcd's authentication on once every member answers as a started voter
    /// and every member's config has its boot script verify the function's root tokens (a member
    /// of an older config would refuse them: it stays off until those are replaced).
    fn access(&self) -> Option<Step> {
        let v = self.view;
        if !self.settings.etcd_auth || v.auth_enabled || v.members.is_empty() {
            return None;
        }
        let ready = v.members.iter().all(|m| {
            !m.is_learner
                && m.is_started()
                && v.healthy.contains(&m.id)
                && self
                    .obs
                    .published
                    .members
                    .get(&m.name)
                    .is_some_and(|p| p.config.root_tokens)
        });
        ready.then_some(Step::EnableAuth)
    }

    fn scheduled_backup(&self) -> Option<Step> {
        let policy = self.settings.backup.as_ref()?;
        if self.obs.backups_failing.is_some() {
            return None;
        }
        let due = crate::backup::due(
            &self.obs.backups,
            &self.token(),
            self.view,
            self.obs.now,
            policy,
        );
        due.then(|| self.backup_step(crate::backup::Reason::Scheduled))
            .flatten()
    }

    fn prune(&self) -> Option<Step> {
        let policy = self.settings.backup.as_ref()?;
        if self.obs.backups_failing.is_some() {
            return None;
        }
        crate::backup::prunable(self.obs, policy)
            .into_iter()
            .next()
            .map(|key| Step::Prune { key })
    }

    /// A started, healthy voter that is staying.
    fn transferee(&self, from: MemberId) -> Option<MemberId> {
        self.view
            .voters()
            .filter(|v| v.id != from && v.is_started() && self.healthy(v))
            .filter(|v| {
                self.instance_of(v)
                    .is_some_and(|i| i.state != LifecycleState::TerminatingWait)
            })
            .map(|v| v.id)
            .min()
    }

    fn launch_completions(&self) -> Vec<Step> {
        by_age(&self.obs.instances)
            .into_iter()
            .filter(|i| i.state == LifecycleState::PendingWait)
            .find_map(|i| {
                let result = match self.member_of(i) {
                    Some(m) if !m.is_learner && m.is_started() => ActionResult::Continue,
                    // Its config was published, so its member existed and has since been removed
                    // (it never started): let the group replace the instance.
                    None if self.obs.published.members.contains_key(&i.id) => ActionResult::Abandon,
                    _ => return None,
                };
                Some(Step::Complete {
                    instance: i.id.clone(),
                    transition: Transition::Launch,
                    result,
                })
            })
            .into_iter()
            .collect()
    }

    fn learner(&self) -> Vec<Step> {
        self.the_learner().into_iter().collect()
    }

    fn the_learner(&self) -> Option<Step> {
        let learner = self.view.learners().min_by_key(|m| m.id)?;
        let Some(instance) = self.instance_of(learner) else {
            return Some(Step::RemoveMember {
                member: learner.id,
                instance: None,
                reason: Removal::InstanceGone,
            });
        };
        if !instance.state.wants_membership() {
            // Terminating ones are rule 2's; standby and warm-pool ones are left alone.
            return (!instance.state.is_present()).then(|| Step::RemoveMember {
                member: learner.id,
                instance: Some(instance.id.clone()),
                reason: Removal::InstanceGone,
            });
        }
        if learner.is_started() {
            return Some(Step::Promote {
                instance: instance.id.clone(),
                member: learner.id,
            });
        }
        let config = self.join_config(instance)?;
        match self.obs.published.members.get(&instance.id) {
            Some(p) if p.config == config => {
                if self.obs.now - p.published_at > self.settings.learner_start_timeout_secs {
                    Some(Step::RemoveMember {
                        member: learner.id,
                        instance: Some(instance.id.clone()),
                        reason: Removal::LearnerNeverStarted,
                    })
                } else {
                    Some(Step::Wait(Wait::LearnerStarting {
                        instance: instance.id.clone(),
                    }))
                }
            }
            _ => Some(Step::Publish {
                instance: instance.id.clone(),
                config,
            }),
        }
    }

    /// Every current member (unstarted ones and learners included) by the name it has or will
    /// have, so the joining etcd's view matches the member list exactly.
    fn join_config(&self, instance: &Instance) -> Option<MemberConfig> {
        let address = instance.address.as_deref()?;
        let t = &self.settings.topology;
        let mut members: Vec<&Member> = self.view.members.iter().collect();
        members.sort_by_key(|m| m.id);
        let initial_cluster = members
            .into_iter()
            .flat_map(|m| {
                let name = if m.is_started() {
                    m.name.clone()
                } else {
                    self.instance_of(m)
                        .map(|i| i.id.clone())
                        .unwrap_or_else(|| m.id.to_string())
                };
                m.peer_urls.iter().map(move |u| (name.clone(), u.clone()))
            })
            .collect();
        let token = self
            .obs
            .published
            .cluster
            .as_ref()
            .map_or_else(|| self.settings.cluster_name.clone(), |r| r.token.clone());
        Some(t.member_config(
            &instance.id,
            address,
            initial_cluster,
            InitialState::Existing,
            token,
        ))
    }

    fn joins(&self) -> Vec<Step> {
        if self.view.learners().next().is_some() {
            return vec![];
        }
        if let Some(v) = self.view.voters().find(|v| !v.is_started()) {
            return vec![Step::Wait(Wait::VoterNotStarted { member: v.id })];
        }
        // etcd refuses every add while a voter is not connected: wait, and let the later rules
        // replace the dead member (whose removal unblocks the join).
        if let Some(v) = self.view.voters().find(|v| !self.healthy(v)) {
            let wants =
                self.obs.instances.iter().any(|i| {
                    i.state.wants_membership() && i.healthy && self.member_of(i).is_none()
                });
            return if wants {
                vec![Step::Wait(Wait::JoinBlocked { member: v.id })]
            } else {
                vec![]
            };
        }
        let mut out = Vec::new();
        for i in by_age(&self.obs.instances).into_iter().filter(|i| {
            i.state.wants_membership()
                && i.healthy
                && self.member_of(i).is_none()
                // A published config without a member means it was removed: rule 3 abandons
                // held instances; one already in service needs an operator, not a second join.
                && !self.obs.published.members.contains_key(&i.id)
        }) {
            let Some(peer_url) = self.peer_url(i) else {
                continue;
            };
            if let Some(holder) = self
                .view
                .members
                .iter()
                .find(|m| m.peer_urls.contains(&peer_url))
            {
                out.push(Step::Wait(Wait::PeerUrlTaken {
                    instance: i.id.clone(),
                    member: holder.id,
                }));
                continue;
            }
            out.push(Step::AddLearner {
                instance: i.id.clone(),
                peer_url,
            });
            break;
        }
        out.sort_by_key(|s| matches!(s, Step::Wait(_)));
        out
    }

    /// Rule 6: voters whose etcd is down while their instance is in service.
    fn replacements(&self) -> Vec<Step> {
        let mut out = Vec::new();
        // A learner joining, or an instance the group is already replacing. (A held termination
        // is not: the replacement of a dead member is what unblocks it.)
        let change_under_way =
            self.view.learners().next().is_some() || self.obs.instances.iter().any(|i| !i.healthy);
        let mut voters: Vec<&Member> = self.view.voters().collect();
        voters.sort_by_key(|m| m.id);
        for m in voters
            .into_iter()
            .filter(|m| m.is_started() && !self.healthy(m))
        {
            let Some(i) = self
                .instance_of(m)
                .filter(|i| i.state == LifecycleState::InService && i.healthy)
            else {
                continue;
            };
            let Some(&since) = self.obs.published.down_since.get(&i.id) else {
                out.push(Step::NoteDown {
                    instance: i.id.clone(),
                    since: self.obs.now,
                });
                continue;
            };
            let down_secs = self.obs.now - since;
            // A second view before replacing: its peers still hold a raft connection to it.
            if self.view.peer_connected.contains(&m.id) {
                out.push(Step::Wait(Wait::MemberUnreachableFromFunction {
                    instance: i.id.clone(),
                    member: m.id,
                    down_secs,
                }));
                continue;
            }
            // One at a time, and only when its terminate hook will be able to remove it.
            if down_secs >= self.settings.unhealthy_replace_secs
                && !change_under_way
                && self.removal_keeps_quorum(m)
                && !out.iter().any(|s| matches!(s, Step::Replace { .. }))
            {
                out.push(Step::Replace {
                    instance: i.id.clone(),
                    why: Replacement::Down {
                        member: m.id,
                        down_secs,
                    },
                });
            } else {
                out.push(Step::Wait(Wait::MemberDown {
                    instance: i.id.clone(),
                    member: m.id,
                    down_secs,
                }));
            }
        }
        out.extend(self.old_generation(change_under_way || !out.is_empty()));
        let busy = change_under_way
            || !out.is_empty()
            || self.obs.instances.iter().any(|i| i.state.is_launching());
        out.extend(self.expiring(busy));
        out.sort_by_key(|s| matches!(s, Step::Wait(_)));
        out
    }

    /// Instances that survived a restore run the old generation's etcd (their config names an
    /// earlier token) and never join the new one: each is replaced by a fresh instance, one at a
    /// time, only while every voter answers and nothing else changes.
    fn old_generation(&self, busy: bool) -> Option<Step> {
        let record = self.obs.published.cluster.as_ref()?;
        let all_voters_answer = self.view.voters().all(|m| self.healthy(m));
        if busy || !all_voters_answer {
            return None;
        }
        by_age(&self.obs.instances).into_iter().find_map(|i| {
            let p = self.obs.published.members.get(&i.id)?;
            let stale = i.state == LifecycleState::InService
                && i.healthy
                && self.member_of(i).is_none()
                && p.config.token != record.token;
            stale.then(|| Step::Replace {
                instance: i.id.clone(),
                why: Replacement::OldGeneration {
                    token: p.config.token.clone(),
                },
            })
        })
    }

    /// TLS=managed: the voter whose certificate ends first, once less than a third of its life
    /// is left, is replaced; one at a time, only while every voter answers and nothing else
    /// changes (a launching instance included). A cluster of one too: its only voter's
    /// termination is held until the replacement is a voter (the last-voter hold), and while the
    /// group's desired capacity says one is coming even before it is listed (a health replacement
    /// that terminates first), so the replacement joins first whatever order the group takes;
    /// without rotation its certificate would end and the cluster stop.
    fn expiring(&self, busy: bool) -> Option<Step> {
        let life = self.settings.member_cert_secs?;
        let single = self.view.voters().count() == 1;
        if busy || !self.view.voters().all(|m| self.healthy(m)) {
            return None;
        }
        self.view
            .voters()
            .filter_map(|m| {
                let i = self
                    .instance_of(m)
                    .filter(|i| i.state == LifecycleState::InService && i.healthy)?;
                if !single && !self.removal_keeps_quorum(m) {
                    return None;
                }
                let &not_after = self.obs.published.cert_not_after.get(&i.id)?;
                (not_after - self.obs.now < life / 3).then_some((not_after, i.id.clone()))
            })
            .min()
            .map(|(not_after, instance)| Step::Replace {
                instance,
                why: Replacement::CertificateExpiring { not_after },
            })
    }

    /// A down-mark of a member that answers again (or has no member any more) goes at once, before
    /// any other rule: a mark left behind would count a later blip from the first one.
    fn forget_recovered(&self) -> Option<Step> {
        self.obs
            .published
            .down_since
            .keys()
            .find(|id| {
                self.obs.instance(id).is_some_and(|i| {
                    self.member_of(i)
                        .is_none_or(|m| self.healthy(m) && m.is_started())
                })
            })
            .map(|id| Step::ForgetDown {
                instance: id.clone(),
            })
    }

    /// Rule 7: configs, key material and down-marks of instances that are gone. A bundle with no
    /// config (handed out by an invocation that died before publishing) goes too: its
    /// certificate's end (`certs/`, written before the bundle and deleted after it) names it.
    fn cleanup(&self) -> Vec<Step> {
        let gone = |id: &str| self.obs.instance(id).is_none_or(|i| !i.state.is_present());
        let published = &self.obs.published;
        let configs = published
            .members
            .keys()
            .chain(
                published
                    .cert_not_after
                    .keys()
                    .filter(|id| !published.members.contains_key(*id)),
            )
            .filter(|id| gone(id))
            .map(|id| Step::Unpublish {
                instance: id.clone(),
            });
        let marks = self
            .obs
            .published
            .down_since
            .keys()
            .filter(|id| gone(id))
            .map(|id| Step::ForgetDown {
                instance: id.clone(),
            });
        configs.chain(marks).take(1).collect()
    }
}

#[cfg(test)]
mod tests;
