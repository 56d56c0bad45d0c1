//! Access: etcd's authentication, turned on once and kept on (ETCD_AUTH=on). Ranked below
//! membership, above maintenance: a one-off, and without it every certificate holder reaches all.

use super::context::Context;
use super::step::Step;

/// Authentication goes on once every member answers as a started voter and every member's
/// config has its boot script verify the function's root tokens (a member of an older config
/// would refuse them: it stays off until those are replaced).
pub fn enable(ctx: &Context) -> Option<Step> {
    let v = ctx.view;
    if !ctx.settings.etcd_auth || v.auth_enabled || v.members.is_empty() {
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
