//! Rules 3 to 5: instances join one at a time, as a learner first, and their launch completes
//! only once they are started voters.

use super::context::{by_age, certificate, Context};
use super::step::{Removal, Step};
use super::wait::Wait;
use crate::model::{
    ActionResult, InitialState, Instance, LifecycleState, Member, MemberConfig, Transition,
};
use crate::versions::Admission;

/// Rule 3: complete the launch of a started voter (CONTINUE), and of an instance whose learner
/// was removed because it never started (ABANDON: the group replaces it).
pub fn launch_completions(ctx: &Context) -> Vec<Step> {
    by_age(&ctx.obs.instances)
        .into_iter()
        .filter(|i| i.state == LifecycleState::PendingWait)
        .find_map(|i| {
            let result = match ctx.member_of(i) {
                Some(m) if !m.is_learner && m.is_started() => ActionResult::Continue,
                // Its config was published, so its member existed and has since been removed
                // (it never started): let the group replace the instance.
                None if ctx.obs.published.members.contains_key(&i.id) => ActionResult::Abandon,
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

/// Rule 4: the one learner: its config, its promotion once started, or its removal if it never
/// starts.
pub fn learner(ctx: &Context) -> Vec<Step> {
    the_learner(ctx).into_iter().collect()
}

fn the_learner(ctx: &Context) -> Option<Step> {
    let learner = ctx.view.learners().min_by_key(|m| m.id)?;
    let Some(instance) = ctx.instance_of(learner) else {
        return Some(remove(ctx, learner, None, Removal::InstanceGone));
    };
    if !instance.state.wants_membership() {
        // Terminating ones are rule 2's; standby and warm-pool ones are left alone.
        return (!instance.state.is_present())
            .then(|| remove(ctx, learner, Some(instance), Removal::InstanceGone));
    }
    if ctx.view.corrupt().contains(&learner.id) {
        return Some(remove(
            ctx,
            learner,
            Some(instance),
            Removal::CorruptLearner,
        ));
    }
    if learner.is_started() {
        return Some(Step::Promote {
            instance: instance.id.clone(),
            member: learner.id,
            endpoint: ctx.leader_endpoint(),
        });
    }
    let (config, address) = join_config(ctx, instance)?;
    match ctx.obs.published.members.get(&instance.id) {
        Some(p) if p.config == config => {
            if ctx.obs.now - p.published_at > ctx.settings.learner_start_timeout_secs {
                Some(remove(
                    ctx,
                    learner,
                    Some(instance),
                    Removal::LearnerNeverStarted,
                ))
            } else {
                Some(Step::Wait(Wait::LearnerStarting {
                    instance: instance.id.clone(),
                }))
            }
        }
        _ => Some(Step::Publish {
            instance: instance.id.clone(),
            instance_arn: instance.arn.clone(),
            certificate: certificate(ctx.obs, ctx.settings, &instance.id, address),
            config,
        }),
    }
}

fn remove(ctx: &Context, m: &Member, instance: Option<&Instance>, reason: Removal) -> Step {
    Step::RemoveMember {
        member: m.id,
        instance: instance.map(|i| i.id.clone()),
        reason,
        endpoint: ctx.endpoint_avoiding(Some(m.id)),
    }
}

/// The version gate's answer for `i`, if it is not "join": a wait naming why, or the refusal of a
/// launch still held (one already in service waits instead: it is never abandoned).
fn gated(ctx: &Context, i: &Instance) -> Option<Step> {
    match admission(ctx, i) {
        Admission::Join => None,
        Admission::Refuse(why) if i.state == LifecycleState::PendingWait => {
            Some(Step::RefuseLaunch {
                instance: i.id.clone(),
                why,
            })
        }
        Admission::Wait(why) | Admission::Refuse(why) => Some(Step::Wait(Wait::VersionGate {
            instance: i.id.clone(),
            why,
        })),
    }
}

/// What etcd allows for `joiner`, from the versions observed: its declared release, the
/// cluster version and every member's own (`crate::versions::admission`). Unknown versions wait.
fn admission(ctx: &Context, joiner: &Instance) -> Admission {
    let Some(version) = joiner.etcd_version else {
        return Admission::Wait(format!(
            "{} declares no etcd version (its {} tag)",
            joiner.id,
            crate::model::VERSION_TAG
        ));
    };
    let Some(cluster) = ctx.view.cluster_version else {
        return Admission::Wait("the cluster version is not known yet".into());
    };
    let members: Vec<(String, Option<crate::model::Version>)> = ctx
        .view
        .members
        .iter()
        .map(|m| {
            let name = if m.is_started() {
                m.name.clone()
            } else {
                m.id.to_string()
            };
            let v = ctx.view.statuses.get(&m.id).and_then(|s| s.etcd_version());
            (name, v)
        })
        .collect();
    crate::versions::auth_admission(version, cluster, ctx.view.auth_enabled)
        .then(|| crate::versions::admission(version, cluster, &members))
}

/// Every current member (unstarted ones and learners included) by the name it has or will
/// have, so the joining etcd's view matches the member list exactly; and the address it names.
fn join_config<'a>(ctx: &Context, instance: &'a Instance) -> Option<(MemberConfig, &'a str)> {
    let address = instance.address.as_deref()?;
    let mut members: Vec<&Member> = ctx.view.members.iter().collect();
    members.sort_by_key(|m| m.id);
    let initial_cluster = members
        .into_iter()
        .flat_map(|m| {
            let name = if m.is_started() {
                m.name.clone()
            } else {
                ctx.instance_of(m)
                    .map(|i| i.id.clone())
                    .unwrap_or_else(|| m.id.to_string())
            };
            m.peer_urls.iter().map(move |u| (name.clone(), u.clone()))
        })
        .collect();
    let config = ctx.settings.topology.member_config(
        &instance.id,
        address,
        initial_cluster,
        InitialState::Existing,
        ctx.token(),
        instance.etcd_version,
    );
    Some((config, address))
}

/// Rule 5: the next healthy instance (oldest first) joins as a learner, only when no learner
/// exists and every voter has started and answers; never over a member of another instance
/// that holds the same peer URL.
pub fn joins(ctx: &Context) -> Vec<Step> {
    if ctx.view.learners().next().is_some() {
        return vec![];
    }
    if let Some(v) = ctx.view.voters().find(|v| !v.is_started()) {
        return vec![Step::Wait(Wait::VoterNotStarted { member: v.id })];
    }
    // A learner gets the leader's data as its raft snapshot: none is added while etcd has found
    // the leader corrupt (rule 6 moves leadership to a sound voter first, `leaving::corrupt`).
    if let Some(leader) = ctx.view.leader.filter(|l| ctx.view.corrupt().contains(l)) {
        return vec![Step::Wait(Wait::CorruptLeader { member: leader })];
    }
    // Stricter than etcd: since 3.5.30 and 3.6.11 etcd accepts an add while a quorum of voters
    // is connected (before, every voter had to be: `server/etcdserver/server.go`,
    // mayAddMember / isConnectedQuorumSinceLess). An add while a voter is down would grow the
    // quorum a dead member counts in: wait, and let the later rules replace the dead member.
    if let Some(v) = ctx.view.voters().find(|v| !ctx.healthy(v)) {
        let wants = ctx
            .obs
            .instances
            .iter()
            .any(|i| i.state.wants_membership() && i.healthy && ctx.member_of(i).is_none());
        return if wants {
            vec![Step::Wait(Wait::JoinBlocked { member: v.id })]
        } else {
            vec![]
        };
    }
    let mut out = Vec::new();
    for i in by_age(&ctx.obs.instances).into_iter().filter(|i| {
        i.state.wants_membership()
            && i.healthy
            && ctx.member_of(i).is_none()
            // A published config without a member means it was removed: rule 3 abandons
            // held instances; one already in service needs an operator, not a second join.
            && !ctx.obs.published.members.contains_key(&i.id)
    }) {
        let Some(peer_url) = ctx.peer_url(i) else {
            continue;
        };
        if let Some(step) = gated(ctx, i) {
            let refused = matches!(step, Step::RefuseLaunch { .. });
            out.push(step);
            if refused {
                break;
            }
            continue;
        }
        if let Some(holder) = ctx
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
            endpoint: ctx.view.endpoint.clone(),
        });
        break;
    }
    out.sort_by_key(|s| matches!(s, Step::Wait(_)));
    out
}
