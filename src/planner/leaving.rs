//! Rules 2 and 6: members that must go are removed while they are alive and the quorum allows,
//! and voters that are dead, of an old generation or near their certificate's end are replaced.

use super::context::{by_age, unpublish, Context};
use super::step::{Removal, Replacement, Step};
use super::wait::Wait;
use crate::model::{ActionResult, Instance, LifecycleState, Member, MemberId, Transition};

/// A member that has to go, and why.
struct Leaving<'a> {
    member: &'a Member,
    instance: Option<&'a Instance>,
    reason: Removal,
}

/// What the removals take from the other concerns: the ranking (`mod.rs`) asks them and hands
/// the answers in, so that no rule file reaches into another's.
pub struct Others<'a> {
    /// The snapshot a healthy voter's removal waits for, when the backup rules want one first
    /// (`backup::before_removal`).
    pub fresh_snapshot: Option<Step>,
    /// What the last voter of a group scaled to zero waits for before it goes: its final
    /// snapshot, and the record saying the cluster sleeps there (`hibernate::hibernate`); None:
    /// it may go.
    pub hibernate: &'a dyn Fn(&Instance) -> Option<Step>,
    /// Whether an adopted member is held until it may leave (`adopt::held`).
    pub adopted_held: &'a dyn Fn(&Member) -> bool,
    /// The adopted members that do not answer: their down-marks noted, and their waits
    /// (`adopt::patience`).
    pub adopted_patience: Vec<Step>,
}

/// Rule 2: every member that must go, the unhealthy ones first (removing a dead member only
/// restores the quorum's margin), then leaving instances by age, then orphans. A healthy voter
/// leaves only behind `others.fresh_snapshot`, when the backup rules want one first.
pub fn removals(ctx: &Context, others: Others) -> Vec<Step> {
    let mut out = Vec::new();
    let mut leaving = terminating(ctx, &mut out, others.hibernate);
    leaving.extend(departed(ctx, others.adopted_held));
    // Stable: within the same health, the order above (leaving by age, then orphans by id).
    leaving.sort_by_key(|l| ctx.healthy(l.member));
    for l in &leaving {
        out.push(removal(ctx, l, others.fresh_snapshot.as_ref()));
    }
    // Adopted members that do not answer: noted and waited for before they go (`departed`).
    out.extend(others.adopted_patience);
    // Action steps before waits, in the order found.
    out.sort_by_key(|s| matches!(s, Step::Wait(_)));
    out
}

/// Terminating instances: the members to remove, and (into `out`) what is done for those that
/// have none (their config deleted, their action completed) or are the last voter.
fn terminating<'a>(
    ctx: &Context<'a>,
    out: &mut Vec<Step>,
    hibernate: &dyn Fn(&Instance) -> Option<Step>,
) -> Vec<Leaving<'a>> {
    let mut leaving = Vec::new();
    for i in by_age(&ctx.obs.instances)
        .into_iter()
        .filter(|i| i.state == LifecycleState::TerminatingWait)
    {
        let Some(m) = ctx.member_of(i) else {
            out.push(release(ctx, i));
            continue;
        };
        if !m.is_learner && ctx.view.voters().count() == 1 {
            out.push(last_voter(ctx, i, hibernate));
            continue;
        }
        leaving.push(Leaving {
            member: m,
            instance: Some(i),
            reason: Removal::Terminating,
        });
    }
    leaving
}

/// A leaving instance without a member: its config goes, then its action completes.
fn release(ctx: &Context, i: &Instance) -> Step {
    if ctx.obs.published.members.contains_key(&i.id) {
        unpublish(ctx.obs, ctx.settings, &i.id)
    } else {
        Step::Complete {
            instance: i.id.clone(),
            transition: Transition::Terminate,
            result: ActionResult::Continue,
        }
    }
}

/// The last voter: replace before remove. With a replacement on its way, hold the instance
/// until it has joined and been promoted; with none and a desired capacity of 0 (the group
/// scaled to zero), the cluster ends with it, once `hibernate` lets it go. (Its address may not
/// be known yet: it is a replacement all the same.)
fn last_voter(ctx: &Context, i: &Instance, hibernate: &dyn Fn(&Instance) -> Option<Step>) -> Step {
    let replacement = by_age(&ctx.obs.instances)
        .into_iter()
        .find(|r| r.id != i.id && r.state.wants_membership() && r.healthy);
    match replacement {
        Some(r) => Step::Wait(Wait::LastVoterHeld {
            instance: i.id.clone(),
            replacement: r.id.clone(),
        }),
        // The group still wants instances: a replacement is coming even if it is not listed
        // yet (Auto Scaling launches it once this one is on its way out, and its
        // DescribeAutoScalingGroups is eventually consistent). Ending the only voter now would
        // lose the cluster.
        None if ctx.obs.desired_capacity > 0 => Step::Wait(Wait::LastVoterAwaitsReplacement {
            instance: i.id.clone(),
            desired_capacity: ctx.obs.desired_capacity,
        }),
        None => hibernate(i).unwrap_or_else(|| release(ctx, i)),
    }
}

/// Voters whose instance left the group, and dead voters whose instance is marked Unhealthy;
/// never an adopted member `adopted_held` holds.
fn departed<'a>(ctx: &Context<'a>, adopted_held: &dyn Fn(&Member) -> bool) -> Vec<Leaving<'a>> {
    let mut voters: Vec<&Member> = ctx.view.voters().collect();
    voters.sort_by_key(|m| m.id);
    voters
        .into_iter()
        .filter_map(|m| {
            // An adopted member stays until the group's instances have taken over, or, one that
            // does not answer, until its patience is spent (`adopt::patience`).
            if adopted_held(m) {
                return None;
            }
            let instance = ctx.instance_of(m);
            let reason = if instance.is_none_or(|i| !i.state.is_present()) {
                Removal::InstanceGone
            } else if instance.is_some_and(|i| {
                !i.healthy && i.state != LifecycleState::TerminatingWait && !ctx.healthy(m)
            }) {
                // Removing a dead voter never lowers the failures the cluster tolerates.
                Removal::Replaced
            } else {
                return None;
            };
            Some(Leaving {
                member: m,
                instance,
                reason,
            })
        })
        .collect()
}

/// One member's removal: held by the quorum guard, after a fresh snapshot, after handing over
/// leadership, or now.
fn removal(ctx: &Context, l: &Leaving, fresh_snapshot: Option<&Step>) -> Step {
    let m = l.member;
    if !ctx.removal_keeps_quorum(m) {
        return Step::Wait(Wait::QuorumGuard {
            member: m.id,
            instance: l
                .instance
                .filter(|i| i.state == LifecycleState::TerminatingWait)
                .map(|i| i.id.clone()),
            blocking: ctx.down_voters(),
        });
    }
    // A healthy member leaves only behind a fresh snapshot; a dead one never waits.
    if ctx.healthy(m) && !m.is_learner {
        if let Some(step) = fresh_snapshot {
            return step.clone();
        }
    }
    // Only a leader that answers can hand over; a hung one loses leadership to an election
    // anyway, and the removal goes to another member.
    if ctx.view.leader == Some(m.id) && !m.is_learner && ctx.healthy(m) {
        if let (Some(to), Some(endpoint)) = (transferee(ctx, m.id), m.client_urls.first()) {
            return Step::TransferLeadership {
                from: m.id,
                to,
                leader_endpoint: endpoint.clone(),
            };
        }
    }
    Step::RemoveMember {
        member: m.id,
        instance: l.instance.map(|i| i.id.clone()),
        reason: l.reason,
        endpoint: ctx.endpoint_avoiding(Some(m.id)),
    }
}

/// A started, healthy voter that etcd has not found corrupt (a leader's data is what every
/// learner added under it receives): one that is staying, else, when every instance is leaving
/// (a group scaled to zero), the one that leaves last.
///
/// A leader that answers is not removed while another sound voter could take over, even one that
/// leaves next: a removed leader can leave a lone survivor that does not know what it last
/// committed, and etcd's raft answers a single voter's ReadIndex with its commit index before
/// it has committed an entry of its own term (`stepLeader`, `MsgReadIndex`, the `IsSingleton`
/// case, in https://github.com/etcd-io/raft/blob/main/raft.go): a linearizable read that goes
/// back in time. The nemesis found it (seed 708, docs/simulation.md): a scale to zero removed
/// the leader of two, and the survivor, elected alone, served a read one revision below a write
/// the old leader had acknowledged.
fn transferee(ctx: &Context, from: MemberId) -> Option<MemberId> {
    let corrupt = ctx.view.corrupt();
    let candidates: Vec<(&Member, &Instance)> = ctx
        .view
        .voters()
        .filter(|v| v.id != from && v.is_started() && ctx.healthy(v))
        .filter(|v| !corrupt.contains(&v.id))
        .filter_map(|v| Some((v, ctx.instance_of(v)?)))
        .collect();
    let leaving = |i: &Instance| i.state == LifecycleState::TerminatingWait;
    let staying = candidates
        .iter()
        .filter(|(_, i)| !leaving(i))
        .map(|(v, _)| v.id)
        .min();
    // Removals go oldest first (`terminating`): the newest leaves last.
    staying.or_else(|| {
        candidates
            .iter()
            .filter(|(_, i)| leaving(i))
            .max_by(|(_, a), (_, b)| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)))
            .map(|(v, _)| v.id)
    })
}

/// Rule 6: voters whose etcd is down while their instance is in service; then instances of an
/// old generation, then certificates near their end, each only while nothing else changes.
pub fn replacements(ctx: &Context) -> Vec<Step> {
    // A learner joining, or an instance the group is replacing. (A held termination is not: the
    // replacement of a dead member is what unblocks it.)
    let change_under_way = ctx.view.learners().next().is_some()
        || ctx.obs.instances.iter().any(|i| being_replaced(ctx, i));
    let mut out = corrupt(ctx, change_under_way);
    // A corrupt majority waits for an operator; it holds up no other replacement.
    let acting = |out: &Vec<Step>| out.iter().any(|s| !matches!(s, Step::Wait(_)));
    out.extend(down(ctx, change_under_way || acting(&out)));
    out.extend(old_generation(ctx, change_under_way || acting(&out)));
    let busy = change_under_way
        || !out.is_empty()
        || ctx.obs.instances.iter().any(|i| i.state.is_launching());
    out.extend(expiring(ctx, busy));
    // While the group will not replace, nothing is marked: each would-be replacement waits.
    let suspended = ctx.obs.replacement_suspended();
    if !suspended.is_empty() {
        for step in &mut out {
            if let Step::Replace { instance, .. } = step {
                *step = Step::Wait(Wait::ReplacementSuspended {
                    instance: instance.clone(),
                    processes: suspended.iter().map(|p| p.to_string()).collect(),
                });
            }
        }
    }
    out.sort_by_key(|s| matches!(s, Step::Wait(_)));
    out
}

/// How long an instance marked Unhealthy may stay in service before it is no longer taken for
/// a replacement under way: the group replaces one within minutes (its health check runs every
/// few seconds), unless it cannot (no capacity of the type in a zone, a launch that fails).
pub const STUCK_SECS: i64 = 900;

/// Whether the group is replacing `i`: marked Unhealthy, in service (Auto Scaling replaces
/// neither a Standby instance nor one already leaving, which is no longer a change to wait for)
/// or leaving now, while the group may replace it (its processes are not suspended), and not
/// marked by the function more than `STUCK_SECS` ago with nothing happening since
/// (`<prefix>/marked/<id>`). One marked by someone else counts until it leaves.
fn being_replaced(ctx: &Context, i: &crate::model::Instance) -> bool {
    if i.healthy || !ctx.obs.replacement_suspended().is_empty() {
        return false;
    }
    match i.state {
        LifecycleState::InService => {
            let marked_at = ctx.obs.published.marked.get(&i.id);
            marked_at.is_none_or(|at| ctx.obs.now - at <= STUCK_SECS)
        }
        LifecycleState::Terminating
        | LifecycleState::TerminatingWait
        | LifecycleState::TerminatingProceed => true,
        _ => false,
    }
}

/// etcd's CORRUPT alarm (<https://etcd.io/docs/v3.6/op-guide/data_corruption/>): while it is
/// raised the whole cluster refuses writes, leases and compaction; reads are still served
/// (`applierV3Corrupt`, on the apply path only,
/// <https://github.com/etcd-io/etcd/blob/v3.6.17/server/etcdserver/apply/corrupt.go>). The member
/// it names is replaced, one at a time and only while the others keep a quorum, never a
/// majority (then an operator must choose whose data to keep); its removal takes a snapshot of a
/// healthy member first (`backup::before_removal`, which never reads a corrupt one). Once the
/// member is gone its alarm is disarmed.
fn corrupt(ctx: &Context, change_under_way: bool) -> Vec<Step> {
    let corrupt = ctx.view.corrupt();
    if corrupt.is_empty() {
        return vec![];
    }
    // etcd raises CORRUPT for member 0 when its leader finds hashes differ with no majority
    // agreeing (`server/etcdserver/corrupt.go`, TriggerCorruptAlarm(0)): whose data to keep is
    // an operator's call, never disarmed here.
    if corrupt.contains(&MemberId(0)) {
        return vec![Step::Wait(Wait::CorruptMajority {
            members: corrupt.into_iter().collect(),
        })];
    }
    if let Some(alarm) = ctx
        .view
        .alarms
        .iter()
        .find(|a| a.kind == crate::model::CORRUPT && ctx.view.member(a.member).is_none())
    {
        return vec![Step::Disarm {
            alarm: alarm.clone(),
            endpoint: ctx.view.endpoint.clone(),
        }];
    }
    // A corrupt leader hands over before anything else is weighed: even while its replacement
    // must wait (another voter down, a corrupt majority), a sound leader is what lets the group
    // add members again (`joining::joins` adds none under a corrupt one).
    if let Some(step) = ctx
        .view
        .leader
        .filter(|l| corrupt.contains(l))
        .and_then(|l| ctx.view.member(l))
        .and_then(|m| corrupt_leader_hands_over(ctx, m))
    {
        return vec![step];
    }
    let voters = ctx.view.voters().count();
    let corrupt_voters = ctx
        .view
        .voters()
        .filter(|m| corrupt.contains(&m.id))
        .count();
    if voters - corrupt_voters < crate::model::quorum(voters) {
        return vec![Step::Wait(Wait::CorruptMajority {
            members: corrupt.into_iter().collect(),
        })];
    }
    if change_under_way {
        return vec![];
    }
    let mut members: Vec<&Member> = ctx
        .view
        .members
        .iter()
        .filter(|m| corrupt.contains(&m.id))
        .collect();
    members.sort_by_key(|m| m.id);
    members
        .into_iter()
        .find_map(|m| {
            let i = ctx
                .instance_of(m)
                .filter(|i| i.state == LifecycleState::InService && i.healthy)?;
            let others_keep_quorum = m.is_learner || ctx.removal_keeps_quorum(m);
            others_keep_quorum.then(|| Step::Replace {
                instance: i.id.clone(),
                why: Replacement::Corrupt { member: m.id },
            })
        })
        .into_iter()
        .collect()
}

/// A corrupt member that leads hands leadership to a sound voter before it is replaced: etcd's
/// periodic check can name the leader itself (it compares the leader's own hash with its
/// followers', `server/etcdserver/corrupt.go`, checkPeerHashes), and the replacement's learner
/// would otherwise get the leader's corrupt data as its raft snapshot. None: it does not lead,
/// or no sound voter can take over (it is replaced all the same: the alarm already stops writes).
fn corrupt_leader_hands_over(ctx: &Context, m: &Member) -> Option<Step> {
    if ctx.view.leader != Some(m.id) || m.is_learner || !ctx.healthy(m) {
        return None;
    }
    let to = transferee(ctx, m.id)?;
    Some(Step::TransferLeadership {
        from: m.id,
        to,
        leader_endpoint: m.client_urls.first()?.clone(),
    })
}

/// Started voters that do not answer, on in-service instances: noted, waited for, replaced.
fn down(ctx: &Context, change_under_way: bool) -> Vec<Step> {
    let mut out = Vec::new();
    let mut voters: Vec<&Member> = ctx.view.voters().collect();
    voters.sort_by_key(|m| m.id);
    for m in voters
        .into_iter()
        .filter(|m| m.is_started() && !ctx.healthy(m))
    {
        let Some(i) = ctx
            .instance_of(m)
            .filter(|i| i.state == LifecycleState::InService && i.healthy)
        else {
            continue;
        };
        let Some(&since) = ctx.obs.published.down_since.get(&i.id) else {
            out.push(Step::NoteDown {
                instance: i.id.clone(),
                since: ctx.obs.now,
            });
            continue;
        };
        let down_secs = ctx.obs.now - since;
        // A second view before replacing: its peers still hold a raft connection to it. For
        // a while only: a peer's gauge can stay up for a member long dead (the zone-loss test
        // stalled twice on such a member, never replaced), and a member the function cannot
        // reach for PEER_VIEW_HOLD times UNHEALTHY_REPLACE_SECS cannot be managed either.
        let held = down_secs < PEER_VIEW_HOLD * ctx.settings.unhealthy_replace_secs;
        if ctx.view.peer_connected.contains(&m.id) && held {
            out.push(Step::Wait(Wait::MemberUnreachableFromFunction {
                instance: i.id.clone(),
                member: m.id,
                down_secs,
            }));
            continue;
        }
        // One at a time, and only when its terminate hook will be able to remove it.
        let replace = down_secs >= ctx.settings.unhealthy_replace_secs
            && !change_under_way
            && ctx.removal_keeps_quorum(m)
            && !out.iter().any(|s| matches!(s, Step::Replace { .. }));
        out.push(if replace {
            Step::Replace {
                instance: i.id.clone(),
                why: Replacement::Down {
                    member: m.id,
                    down_secs,
                },
            }
        } else {
            Step::Wait(Wait::MemberDown {
                instance: i.id.clone(),
                member: m.id,
                down_secs,
            })
        });
    }
    out
}

/// How many times UNHEALTHY_REPLACE_SECS a member its peers still see connected is kept from
/// replacement while it does not answer the function.
pub const PEER_VIEW_HOLD: i64 = 6;

/// Instances that survived a restore run the old generation's etcd (their config names an
/// earlier token) and never join the new one: each is replaced by a fresh instance, one at a
/// time, only while every voter answers and nothing else changes.
fn old_generation(ctx: &Context, busy: bool) -> Option<Step> {
    let record = ctx.obs.published.cluster.as_ref()?;
    let all_voters_answer = ctx.view.voters().all(|m| ctx.healthy(m));
    if busy || !all_voters_answer {
        return None;
    }
    by_age(&ctx.obs.instances).into_iter().find_map(|i| {
        let p = ctx.obs.published.members.get(&i.id)?;
        let stale = i.state == LifecycleState::InService
            && i.healthy
            && ctx.member_of(i).is_none()
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
/// How much earlier than a third of its life `instance`'s certificate is renewed: from 0 to a
/// sixth of it, fixed by the instance id. Members whose certificates end together (the first
/// members, issued together) are renewed apart, so that their new ends lie up to a sixth of a
/// life apart and a rotation held up for long never finds them all ending at once.
pub fn spread(instance: &str, life: i64) -> i64 {
    // FNV-1a: the same for an id whatever the build.
    let hash = instance.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (life / 6) * (hash % 1000) as i64 / 1000
}

fn expiring(ctx: &Context, busy: bool) -> Option<Step> {
    let life = ctx.settings.member_cert_secs?;
    let single = ctx.view.voters().count() == 1;
    if busy || !ctx.view.voters().all(|m| ctx.healthy(m)) {
        return None;
    }
    ctx.view
        .voters()
        .filter_map(|m| {
            let i = ctx
                .instance_of(m)
                .filter(|i| i.state == LifecycleState::InService && i.healthy)?;
            if !single && !ctx.removal_keeps_quorum(m) {
                return None;
            }
            let &not_after = ctx.obs.published.cert_not_after.get(&i.id)?;
            let due = not_after - ctx.obs.now < life / 3 + spread(&i.id, life);
            due.then_some((not_after, i.id.clone()))
        })
        .min()
        .map(|(not_after, instance)| Step::Replace {
            instance,
            why: Replacement::CertificateExpiring { not_after },
        })
}
