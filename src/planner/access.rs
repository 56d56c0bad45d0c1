//! Access: etcd's authentication, turned on once and kept on (ETCD_AUTH=on). Ranked below
//! membership, above maintenance: a one-off, and without it every certificate holder reaches all.
//!
//! An adopted cluster keeps its authentication as it was found unless ETCD_AUTH=on is set
//! explicitly: turning it on refuses every client whose certificate's common name is no etcd
//! user (etcd takes the user from the CN once authentication is on,
//! https://etcd.io/docs/v3.6/op-guide/authentication/rbac/, "Using TLS Common Name"), which the
//! team's old clients did not need. The default of TLS=managed is for the clusters the stack
//! starts, whose clients all come from `etcd-asg client-cert`.

use super::context::Context;
use super::step::Step;

/// Authentication goes on once every member answers as a started voter and every member's
/// config has its boot script verify the function's root tokens (a member of an older config
/// would refuse them: it stays off until those are replaced); for an adopted cluster only with
/// ETCD_AUTH=on set explicitly.
pub fn enable(ctx: &Context) -> Option<Step> {
    let v = ctx.view;
    if !ctx.settings.etcd_auth || v.auth_enabled || v.members.is_empty() {
        return None;
    }
    let adopted = ctx
        .obs
        .published
        .cluster
        .as_ref()
        .is_some_and(|r| r.adopted());
    if adopted && !ctx.settings.etcd_auth_explicit {
        return None;
    }
    let versions: Vec<_> = v.statuses.values().map(|s| s.etcd_version()).collect();
    if !crate::versions::auth_may_turn_on(v.cluster_version, &versions) {
        return None;
    }
    let ready = v.members.iter().all(|m| {
        !m.is_learner
            && m.is_started()
            && v.healthy.contains(&m.id)
            && ctx
                .obs
                .published
                .members
                .get(&m.name)
                .is_some_and(|p| p.config.root_tokens)
    });
    ready.then(|| Step::EnableAuth {
        endpoint: v.endpoint.clone(),
    })
}
