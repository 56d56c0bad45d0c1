//! Rule 7, and down-marks: what is left of instances that are gone or well again.

use super::context::{unpublish, Context};
use super::step::Step;

/// A down-mark of a member that answers again (or has no member any more) goes at once, before
/// any other rule: a mark left behind would count a later blip from the first one. An instance
/// marked Unhealthy keeps its mark while the group still lists it: it tells how long ago it was
/// marked (`leaving::being_replaced`).
pub fn forget_recovered(ctx: &Context) -> Option<Step> {
    ctx.obs
        .published
        .down_since
        .keys()
        .find(|id| {
            ctx.obs
                .instance(id)
                .is_some_and(|i| match ctx.member_of(i) {
                    None => i.healthy,
                    Some(m) => ctx.healthy(m) && m.is_started(),
                })
        })
        .map(|id| Step::ForgetDown {
            instance: id.clone(),
        })
}

/// Rule 7: configs, key material and down-marks of instances that are gone. A bundle with no
/// config (handed out by an invocation that died before publishing) goes too: its
/// certificate's end (`certs/`: `issuing` from before the bundle is written, then the end; it
/// is deleted with it) names it. `adopted_mark` tells an adopted member's down-mark, which names
/// no instance (`adopt::owns_mark`, which the ranking hands in).
pub fn cleanup(ctx: &Context, adopted_mark: fn(&str) -> bool) -> Vec<Step> {
    let obs = ctx.obs;
    let gone = |id: &str| obs.instance(id).is_none_or(|i| !i.state.is_present());
    let published = &obs.published;
    let configs = published
        .members
        .keys()
        .chain(
            published
                .cert_not_after
                .keys()
                .chain(&published.issuing)
                .filter(|id| !published.members.contains_key(*id)),
        )
        .filter(|id| gone(id))
        .map(|id| unpublish(obs, ctx.settings, id));
    // An adopted member's mark names no instance: `adopt::patience` keeps and forgets those.
    let marks = published
        .down_since
        .keys()
        .chain(published.marked.keys())
        .filter(|id| gone(id) && !adopted_mark(id))
        .map(|id| Step::ForgetDown {
            instance: id.clone(),
        });
    configs.chain(marks).take(1).collect()
}
