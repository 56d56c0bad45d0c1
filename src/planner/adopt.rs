//! Rule 0a: a cluster that ran before this stack, adopted with no downtime (docs/adopting.md).
//!
//! With `ADOPT_ENDPOINTS` and no cluster record, the cluster that answers there is checked; fit,
//! its record is written (served, its own cluster id, its members at adoption); unfit, nothing
//! changes and the wait says why. From then on it is this stack's cluster like any other: the
//! group's instances join as learners and are promoted (rules 3 and 4); the adopted members
//! stay until the group has taken over (every instance it wants is a started voter, no
//! learner), then leave one at a time behind the quorum guard, a leader handing over to a
//! member of the group first (rule 2); once none is left the record says the adoption is over.
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
use crate::versions::Version;

/// The oldest cluster version adopted: learners came with 3.4.
pub const ADOPT_FLOOR: Version = Version::new(3, 4, 0);

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
    if view.auth_enabled {
        return Some(
            "authentication is on: adopting with credentials is not supported yet (turn it off, or wait for it)"
                .into(),
        );
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
    match view.cluster_version {
        Some(v) if v >= ADOPT_FLOOR => None,
        Some(v) => Some(format!(
            "the cluster version {v} is below {ADOPT_FLOOR}: etcd has no learners before it"
        )),
        None => Some("the cluster does not say its version".into()),
    }
}

/// Whether the adopted members may leave: the group's instances have taken over, every one it
/// wants a started voter (as many as the desired capacity) and no learner is joining.
pub fn taken_over(ctx: &Context) -> bool {
    let wanted: Vec<_> = ctx
        .obs
        .instances
        .iter()
        .filter(|i| i.state.wants_membership() && i.state != LifecycleState::TerminatingWait)
        .collect();
    let joined = wanted
        .iter()
        .filter(|i| {
            ctx.member_of(i)
                .is_some_and(|m| !m.is_learner && m.is_started())
        })
        .count();
    ctx.view.learners().next().is_none()
        && joined == wanted.len()
        && joined >= ctx.obs.desired_capacity.max(1) as usize
}

/// Whether `member` is one of the adopted members still held until the group has taken over.
pub fn held(ctx: &Context, member: crate::model::MemberId) -> bool {
    ctx.obs
        .published
        .cluster
        .as_ref()
        .and_then(|r| r.adopting.as_ref())
        .is_some_and(|a| a.members.contains(&member.0))
        && !taken_over(ctx)
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
