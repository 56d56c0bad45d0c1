//! Rule 0a: a cluster that ran before this stack, adopted with no downtime (docs/adopting.md).
//!
//! With `ADOPT_ENDPOINTS` and no cluster record, the cluster that answers there is checked; fit,
//! its record is written (served, its own cluster id, its members at adoption); unfit, nothing
//! changes and the wait says why. From then on it is this stack's cluster like any other: the
//! group's instances join as learners and are promoted (rules 3 and 4), one at a time, and after
//! each promotion that takes the voters past the group's desired capacity an adopted member
//! leaves (rule 2: behind the quorum guard, a leader handing over to a member of the group
//! first), so the cluster never holds more than one voter beyond its size and never splits
//! evenly between the old members and the new; a dead adopted member is removed at once (that
//! never lowers the failures tolerated). Once none is left the record says the adoption is over.
//! Every write is the create-only record or a membership change the next observation shows,
//! so a crash or a lost answer anywhere is rolled forward by the next invocation.
//!
//! etcd's runtime reconfiguration guide: add a member as a learner, promote it once it has
//! caught up, remove one member at a time
//! (https://etcd.io/docs/v3.6/op-guide/runtime-configuration/); learners exist since 3.4
//! (https://etcd.io/docs/v3.6/learning/design-learner/).

use super::context::Context;
use super::step::{Step, Wait};
use crate::model::{Adopting, ClusterRecord, LifecycleState, RecordState};
use crate::versions::{admission, Admission, Version};

/// The oldest cluster version adopted: learners came with 3.4.
pub const ADOPT_FLOOR: Version = Version::new(3, 4, 0);

/// What an operator does for a cluster with authentication on (docs/adopting.md).
pub const STORE_PASSWORD: &str =
    "store its root password: etcd-asg adopt-secrets --root-password-file FILE";

/// No record, ADOPT_ENDPOINTS set, and a cluster answers: its record, or why not.
pub fn adopt(ctx: &Context) -> Option<Step> {
    if ctx.settings.adopt.is_empty() || ctx.obs.published.cluster.is_some() {
        return None;
    }
    if let Some(why) = unfit(ctx) {
        return Some(Step::Wait(Wait::AdoptionRefused { why }));
    }
    let view = ctx.view;
    let leader = view.members.iter().find(|m| Some(m.id) == view.leader)?;
    let now = ctx.obs.now;
    Some(Step::CreateCluster(ClusterRecord {
        state: RecordState::Served,
        cluster_id: Some(view.cluster_id),
        adopting: Some(Adopting {
            members: view.members.iter().map(|m| m.id.0).collect(),
            since: now,
        }),
        ..ClusterRecord::bootstrapping(
            format!(
                "{}-adopted-{:x}",
                ctx.settings.cluster_name, view.cluster_id
            ),
            leader.name.clone(),
            now,
        )
    }))
}

/// Why the cluster that answers cannot be adopted as it is, the first reason found.
fn unfit(ctx: &Context) -> Option<String> {
    let view = ctx.view;
    let name = |id| {
        view.members
            .iter()
            .find(|m| m.id == id)
            .map_or(String::new(), |m| m.name.clone())
    };
    if let Some(m) = view.members.iter().find(|m| m.is_learner) {
        return Some(format!(
            "member {} ({:x}) is a learner: promote or remove it first",
            m.name, m.id.0
        ));
    }
    if let Some(m) = view.members.iter().find(|m| !m.is_started()) {
        return Some(format!("member {:x} was added but never started", m.id.0));
    }
    let mut names: Vec<&str> = view.members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Some(format!(
            "two members are named {:?}: names must be unique",
            w[0]
        ));
    }
    if let Some(e) = ctx
        .settings
        .adopt
        .iter()
        .find(|e| !view.members.iter().any(|m| m.client_urls.contains(e)))
    {
        return Some(format!(
            "ADOPT_ENDPOINTS names {e}, which no member of the cluster that answers advertises: name the members' own client URLs"
        ));
    }
    if let Some(m) = view.members.iter().find(|m| !ctx.healthy(m)) {
        return Some(format!(
            "member {} ({:x}) does not answer: every member must be healthy",
            m.name, m.id.0
        ));
    }
    if !view.members.iter().any(|m| Some(m.id) == view.leader) {
        return Some("the cluster has no leader".into());
    }
    if let Some(a) = view.alarms.first() {
        return Some(format!(
            "alarm {} is raised for member {}: disarm it first",
            a.kind,
            name(a.member)
        ));
    }
    if let Some(why) = &view.root_refused {
        return Some(format!(
            "authentication is on, and the function cannot act as its root: {STORE_PASSWORD} ({why})"
        ));
    }
    let scheme = format!("{}://", ctx.settings.topology.peer_scheme.as_str());
    if let Some(m) = view
        .members
        .iter()
        .find(|m| m.peer_urls.iter().any(|u| !u.starts_with(&scheme)))
    {
        return Some(format!(
            "member {} has peer URLs {:?}: the stack's members use {scheme}",
            m.name, m.peer_urls
        ));
    }
    let cluster = match view.cluster_version {
        Some(v) if v >= ADOPT_FLOOR => v,
        Some(v) => {
            return Some(format!(
                "the cluster version {v} is below {ADOPT_FLOOR}: etcd has no learners before it"
            ))
        }
        None => return Some("the cluster does not say its version".into()),
    };
    joiners_refused(ctx, cluster)
}

/// The group's etcd must be one the cluster lets join (the version gate's own rule); else the
/// adoption would be recorded and every launch then refused.
fn joiners_refused(ctx: &Context, cluster: Version) -> Option<String> {
    let versions: Vec<(String, Option<Version>)> = ctx
        .view
        .members
        .iter()
        .map(|m| {
            let v = ctx.view.statuses.get(&m.id).and_then(|s| s.etcd_version());
            (m.name.clone(), v)
        })
        .collect();
    ctx.obs
        .instances
        .iter()
        .filter(|i| i.state.is_launching())
        .filter_map(|i| i.etcd_version)
        .find_map(|joiner| match admission(joiner, cluster, &versions) {
            Admission::Refuse(why) => Some(format!("the stack's etcd can never join: {why}")),
            _ => None,
        })
}

/// Whether an adopted member may leave now: no learner is joining, every voter of the group's
/// instances answers, at least one of them can take the lead, and either the voters are more
/// than the group's desired capacity (one joined in its place) or every instance the group
/// wants is a voter already (the last ones go).
pub fn may_leave(ctx: &Context) -> bool {
    let wanted: Vec<_> = ctx
        .obs
        .instances
        .iter()
        .filter(|i| i.state.wants_membership() && i.state != LifecycleState::TerminatingWait)
        .collect();
    let ours: Vec<&crate::model::Member> = wanted
        .iter()
        .filter_map(|i| ctx.member_of(i))
        .filter(|m| !m.is_learner && m.is_started())
        .collect();
    let joined = ours.len();
    let all_answer = ours.iter().all(|m| ctx.healthy(m));
    ctx.view.learners().next().is_none()
        && joined > 0
        && all_answer
        && (ctx.view.voters().count() > ctx.obs.desired_capacity.max(1) as usize
            || joined == wanted.len())
}

/// Whether `member` is one of the adopted members, alive and held until it may leave. A dead
/// one is not held: removing a dead voter never lowers the failures the cluster tolerates (one
/// its peers still see connected is alive: the function alone cannot reach it).
pub fn held(ctx: &Context, member: &crate::model::Member) -> bool {
    ctx.obs
        .published
        .cluster
        .as_ref()
        .and_then(|r| r.adopting.as_ref())
        .is_some_and(|a| a.members.contains(&member.id.0))
        && (ctx.healthy(member) || ctx.view.peer_connected.contains(&member.id))
        && !may_leave(ctx)
}

/// While an adoption is under way and nobody answers: an adopted cluster's members are outside
/// the group, so their loss cannot be told from a partition, and nothing is ever restored over
/// them (backup::recovery is not asked).
pub fn while_unreachable(record: &ClusterRecord, detail: &str) -> Option<super::step::Plan> {
    record.adopting.as_ref()?;
    Some(super::step::Plan::waiting(Wait::ClusterUnreachable {
        detail: format!(
            "{detail}; an adoption is under way and its members are outside the group: nothing is restored"
        ),
    }))
}

/// The adoption is over once none of the adopted members is left: the record says so.
pub fn finished(ctx: &Context) -> Option<Step> {
    let record = ctx.obs.published.cluster.as_ref()?;
    let adopting = record.adopting.as_ref()?;
    let left = ctx
        .view
        .members
        .iter()
        .any(|m| adopting.members.contains(&m.id.0));
    (!left).then(|| {
        Step::MarkServed(ClusterRecord {
            adopting: None,
            ..record.clone()
        })
    })
}
