//! Rule 0a: a cluster that ran before this stack, adopted with no downtime (docs/adopting.md).
//!
//! With `ADOPT_ENDPOINTS` and no cluster record, the cluster that answers there is checked; fit,
//! its record is written (served, its own cluster id, its members at adoption); unfit, nothing
//! changes and the wait says why. From then on it is this stack's cluster like any other: the
//! group's instances join as learners and are promoted (rules 3 and 4), one at a time, and after
//! each promotion that takes the voters past the group's desired capacity an adopted member
//! leaves (rule 2: behind the quorum guard, a leader handing over to a member of the group
//! first), so the cluster never holds more than one voter beyond its size. It does split
//! evenly for a while: with one voter beyond an odd size, old and new can be as many (two and
//! two at size 3). Avoiding that would take an old member out before the next promotion, down
//! to two voters and no failure tolerated: worse than an even four, which loses no write (raft
//! commits only on a majority of all four) and only stops serving while a link between the
//! halves is cut. An adopted member that does not answer is given the patience the group's
//! members get (`patience`), and never leaves two voters before a member of the group has
//! joined. Once none is left the record says the adoption is over.
//! Every write is the create-only record or a membership change the next observation shows,
//! so a crash or a lost answer anywhere is rolled forward by the next invocation.
//!
//! etcd's runtime reconfiguration guide: add a member as a learner, promote it once it has
//! caught up, remove one member at a time
//! (https://etcd.io/docs/v3.6/op-guide/runtime-configuration/); learners exist since 3.4
//! (https://etcd.io/docs/v3.6/learning/design-learner/).

use super::context::Context;
use super::step::{Step, STORE_PASSWORD};
use super::wait::Wait;
use crate::model::{Adopting, ClusterRecord, LifecycleState, Member, RecordState, TokenKind};
use crate::versions::{admission, auth_admission, Admission, Version};

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
        adopted_auth: Some(view.auth_enabled),
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
    mixed_tokens(ctx)
        .or_else(|| too_big(ctx))
        .or_else(|| joiners_refused(ctx, cluster))
}

/// With TLS=managed the stack's members sign JWTs (`MemberConfig::root_tokens`); an old member
/// that hands out etcd's simple tokens must not serve beside them. etcd replicates a password
/// login with the token prefix of the member that took it, which a JWT member leaves empty
/// (`server/auth/jwt.go` `genTokenPrefix`), and a simple-token member registers the token
/// `"<prefix>.<raft index>"` (`server/auth/simple_token.go` `assign`): a login at a new member
/// would give every old one the guessable token `.<index>` for that user, root's included.
/// With TLS=off both sides use simple tokens, each with a random prefix: nothing mixes.
/// A member whose kind could not be told is refused too, for this invocation (the next reads
/// it again): never adopted on a guess.
fn mixed_tokens(ctx: &Context) -> Option<String> {
    if !ctx.settings.topology.mutual_tls {
        return None;
    }
    let first = |kind| {
        ctx.view
            .token_kinds
            .iter()
            .find(|(_, k)| *k == kind)
            .map(|(m, _)| m)
    };
    if let Some(member) = first(TokenKind::Unknown) {
        return Some(format!(
            "member {member}'s kind of authentication token could not be read (no answer to a \
             read as root, or no login): the stack's members use JWTs, which must not serve \
             beside simple tokens"
        ));
    }
    let member = first(TokenKind::Simple)?;
    Some(format!(
        "member {member} hands out etcd's simple tokens (--auth-token simple, the default), \
             and the stack's members use JWTs: while both serve, a password login at a new \
             member would give the old ones a guessable token for that user. Restart the old \
             members with --auth-token jwt,... first (docs/adopting.md)"
    ))
}

/// The share of QUOTA_BACKEND_BYTES (in tenths) the largest member's database may fill for the
/// cluster to be adopted.
const QUOTA_ROOM_TENTHS: u64 = 9;

/// The stack's members must have room for the cluster's database. etcd raises NOSPACE, for the
/// whole cluster, when a member applies a write while its backend's size plus the write's cost
/// reaches its quota (https://etcd.io/docs/v3.6/op-guide/maintenance/#space-quota;
/// `BackendQuota.Available`, server/storage/quota.go), and a learner receives the leader's
/// database as its raft snapshot at its size (free pages included: bbolt's `Tx.WriteTo` copies
/// the file up to its high-water mark): a learner whose quota is below it raises the alarm at
/// its first applied write (seen: a 26 MB cluster, a 16 MiB quota, NOSPACE within seconds).
/// Refused at 90 % of the quota already: the cluster keeps growing through the adoption (a
/// learner joins, is promoted and the next follows, minutes each), and 90 % is where this
/// stack's own maintenance takes a file as near its quota (`maintenance::nearly_full`).
fn too_big(ctx: &Context) -> Option<String> {
    let quota = ctx.settings.topology.quota_backend_bytes;
    let (id, size) = ctx
        .view
        .statuses
        .iter()
        .map(|(id, s)| (*id, s.db_size))
        .max_by_key(|(_, size)| *size)?;
    if size.saturating_mul(10) < quota.saturating_mul(QUOTA_ROOM_TENTHS) {
        return None;
    }
    let name = ctx.view.member(id).map_or("", |m| m.name.as_str());
    Some(format!(
        "member {name} ({:x}) has a database of {} MiB, and the stack's members would have a \
         quota of {} MiB (QUOTA_BACKEND_BYTES): a learner over its quota raises NOSPACE for the \
         whole cluster; defragment the members (etcdctl defrag) or give the stack a quota above \
         {} MiB (QuotaBackendBytes: the database at most {}0 % of it)",
        id.0,
        size >> 20,
        quota >> 20,
        (size * 10 / QUOTA_ROOM_TENTHS) >> 20,
        QUOTA_ROOM_TENTHS
    ))
}

/// The group's etcd must be one the cluster lets join (the version gate's own rules: its
/// release, and no 3.5 or later into a 3.4 cluster with authentication on,
/// `versions::auth_admission`); else the adoption would be recorded and every launch then
/// refused.
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
        .find_map(|joiner| {
            match auth_admission(joiner, cluster, ctx.view.auth_enabled)
                .then(|| admission(joiner, cluster, &versions))
            {
                Admission::Refuse(why) => Some(format!("the stack's etcd can never join: {why}")),
                _ => None,
            }
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
    let ours: Vec<&Member> = wanted
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

/// Whether `member` is one of the members the adoption under way started from.
fn is_adopted(ctx: &Context, member: &Member) -> bool {
    ctx.obs
        .published
        .cluster
        .as_ref()
        .and_then(|r| r.adopting.as_ref())
        .is_some_and(|a| a.members.contains(&member.id.0))
}

/// It answers, or its peers still see it connected (the function alone cannot reach it).
fn alive(ctx: &Context, member: &Member) -> bool {
    ctx.healthy(member) || ctx.view.peer_connected.contains(&member.id)
}

/// Whether `member` is one of the adopted members, held until it may leave: while it is alive,
/// and while it does not answer until its patience is spent (`not_yet`).
pub fn held(ctx: &Context, member: &Member) -> bool {
    is_adopted(ctx, member)
        && !may_leave(ctx)
        && (alive(ctx, member) || not_yet(ctx, member).is_some())
}

/// An adopted member's down-mark (`<prefix>/down/adopted-<member id, hex>`): it has no
/// instance to name it by.
const DOWN_PREFIX: &str = "adopted-";

fn down_key(member: &Member) -> String {
    format!("{DOWN_PREFIX}{:x}", member.id.0)
}

/// Whether a down-mark is an adopted member's (`patience` keeps and forgets those).
pub fn owns_mark(key: &str) -> bool {
    key.starts_with(DOWN_PREFIX)
}

/// Why an adopted member that does not answer is not removed yet: its down-mark to note, or
/// the wait. An old member's probe fails for more than its death (a blip; with TLS the peer
/// view reads a metrics port old members seldom serve), so it is given the patience a member of
/// the group gets before it is replaced (`UNHEALTHY_REPLACE_SECS`, from its down-mark, as
/// `leaving::down`). And never while that would leave two voters before a member of the group
/// has joined: two tolerate no failure, and the function cannot tell a member dead from one it
/// cannot reach (an operator can: `etcdctl member remove`). None: it may go.
fn not_yet(ctx: &Context, member: &Member) -> Option<Step> {
    let key = down_key(member);
    let Some(&since) = ctx.obs.published.down_since.get(&key) else {
        return Some(Step::NoteDown {
            instance: key,
            since: ctx.obs.now,
        });
    };
    let down_secs = ctx.obs.now - since;
    let patient = down_secs < ctx.settings.unhealthy_replace_secs;
    let group_joined = ctx.view.voters().any(|v| !is_adopted(ctx, v));
    let last_margin = ctx.view.voters().count() <= 3 && !group_joined;
    (patient || last_margin).then(|| {
        Step::Wait(Wait::AdoptedMemberDown {
            member: member.id,
            name: member.name.clone(),
            down_secs,
            last_margin: !patient,
        })
    })
}

/// Rule 2, for the adopted members that do not answer: each one's down-mark noted, then its wait
/// while `not_yet` holds it; and the marks of members that answer again or are gone forgotten
/// (a mark left behind would count a later blip from the first one).
pub fn patience(ctx: &Context) -> Vec<Step> {
    let forget = ctx
        .obs
        .published
        .down_since
        .keys()
        .filter(|k| owns_mark(k))
        .filter(|k| {
            let member = ctx.view.members.iter().find(|m| down_key(m) == **k);
            member.is_none_or(|m| alive(ctx, m) || !is_adopted(ctx, m))
        })
        .map(|k| Step::ForgetDown {
            instance: k.clone(),
        });
    let mut voters: Vec<&Member> = ctx.view.voters().collect();
    voters.sort_by_key(|m| m.id);
    let held = voters
        .into_iter()
        .filter(|m| is_adopted(ctx, m) && !alive(ctx, m) && !may_leave(ctx))
        .filter_map(|m| not_yet(ctx, m));
    forget.chain(held).collect()
}

/// While an adoption is under way and nobody answers: an adopted cluster's members are outside
/// the group, so their loss cannot be told from a partition, and nothing is ever restored over
/// them (`recovery::recovery` is not asked).
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
