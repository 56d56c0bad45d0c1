//! Rules 0 and 1: the cluster record stays true, and a cluster is bootstrapped exactly once.

use super::context::{by_age, certificate, needs_certificate, seed_candidate, unpublish, Context};
use super::step::{MemberCertificate, Plan, Step, STORE_PASSWORD};
use super::wait::Wait;
use crate::config::Settings;
use crate::model::{
    ActionResult, ClusterRecord, InitialState, Instance, LifecycleState, MemberConfig, Observation,
    RecordState, Transition,
};

/// Rule 0: the record says whether the cluster served and which cluster it is.
pub fn bookkeeping(ctx: &Context) -> Option<Step> {
    let (obs, view) = (ctx.obs, ctx.view);
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
        // A fence that says served with a record that does not: a crash or a lost answer
        // between the two writes of `mark_served`, rolled forward.
        if obs.published.served(record) || seed_serves {
            return Some(Step::MarkServed(ClusterRecord {
                state: RecordState::Served,
                cluster_id: Some(view.cluster_id),
                ..record.clone()
            }));
        }
        return None;
    }
    // Scaled back up before the last voter left: once a voter serves on an instance in service
    // the cluster runs on, its sleeping snapshot is not its data any more (a later loss restores
    // the latest backup, as any other). Not while the last voter is only on its way out.
    let running_on = view.voters().any(|m| {
        ctx.instance_of(m)
            .is_some_and(|i| i.state == LifecycleState::InService)
    });
    if record.sleeping.is_some() && obs.desired_capacity > 0 && running_on {
        return Some(Step::Sleep(ClusterRecord {
            sleeping: None,
            ..record.clone()
        }));
    }
    // Once it served, the seed's config never says `new` again: if the seed lost its data it
    // would bootstrap a one-member cluster with the very same member and cluster ids. With
    // `existing` and nobody else listed, such an etcd refuses to start instead.
    // Only for a seed still in the group: a vanished seed's config is cleanup's to delete (and
    // a certificate could not be issued for an instance without an address).
    let seed = obs
        .instance(&record.seed)
        .filter(|i| i.state.is_present())?;
    let seed_config = obs.published.members.get(&record.seed)?;
    let needs_rewrite =
        seed_config.config.state == InitialState::New || seed_config.config.restore.is_some();
    if !needs_rewrite {
        return None;
    }
    let certificate = match needs_certificate(obs, ctx.settings, &seed.id) {
        // Without an address no certificate can name it: rewritten once EC2 shows one.
        true => Some(MemberCertificate {
            address: seed.address.clone()?,
        }),
        false => None,
    };
    Some(Step::Publish {
        instance: record.seed.clone(),
        instance_arn: seed.arn.clone(),
        config: MemberConfig {
            state: InitialState::Existing,
            // Restoring again would found a second copy of the cluster.
            restore: None,
            ..seed_config.config.clone()
        },
        certificate,
    })
}

/// Rule 1 with nobody answering and no record that served: a brand-new cluster, a bootstrap
/// under way, or a seed that never served to replace. What a brand-new cluster starts from
/// (empty, or a backup) is `first_generation`'s to say, for the seed (`recovery`, which the
/// ranking hands in).
pub fn bootstrap(
    obs: &Observation,
    settings: &Settings,
    detail: &str,
    first_generation: impl FnOnce(&Instance) -> Step,
) -> Plan {
    let Some(record) = &obs.published.cluster else {
        // A cluster to adopt that does not answer is never replaced by a new, empty one.
        if !settings.adopt.is_empty() {
            // etcd 3.6 refuses even the member list without a user once authentication is on,
            // and a member of the cluster refuses the function's own tokens.
            let why = if detail.contains("UserEmpty") || detail.contains("InvalidAuthToken") {
                format!(
                    "authentication is on, and the function cannot act as its root: {} ({detail})",
                    STORE_PASSWORD
                )
            } else {
                format!("the cluster at ADOPT_ENDPOINTS does not answer ({detail})")
            };
            return Plan::waiting(Wait::AdoptionRefused { why });
        }
        // No record and nobody answering: a brand-new cluster (empty, or restored from the
        // backup an operator asked for). The create-only write decides. Only a launching
        // instance may seed: one in service may run etcd we cannot reach.
        return Plan::only(seed_candidate(obs, None).map_or(Step::Idle, first_generation));
    };
    if let Some(step) = release_terminations(obs, settings) {
        return Plan::only(step);
    }
    // A replacement already decided (the fence written, the record not), rolled forward as
    // decided while its seed is held at launch; else one planned anew meets the fence, which
    // writes the decided one, and the next observation goes on from it.
    if let Some(new) = obs.published.replacement(record) {
        if let Some(next) = obs.instance(&new.seed).filter(|i| i.state.is_launching()) {
            return Plan::only(Step::ReseedCluster {
                seed_arn: next.arn.clone(),
                old: record.clone(),
                new: new.clone(),
            });
        }
    }
    // Bootstrap is under way only while the seed is still held at launch: its action completes
    // once it is a started voter (and the record says served), so a seed in service with a
    // record that never served is a cluster we cannot see. Publishing `new` could found a second.
    let seed = obs.instance(&record.seed);
    if seed.is_some_and(|i| !i.state.is_launching() && i.state.wants_membership()) {
        return Plan::waiting(Wait::ClusterUnreachable {
            detail: detail.to_string(),
        });
    }
    match seed.filter(|i| i.state.is_launching() && i.healthy) {
        Some(seed) => Plan::only(seed_step(obs, settings, record, seed)),
        // The seed never served and is gone (or leaving): choose another, conditionally.
        None => Plan::only(match seed_candidate(obs, Some(&record.seed)) {
            Some(next) => Step::ReseedCluster {
                seed_arn: next.arn.clone(),
                old: record.clone(),
                new: ClusterRecord {
                    restored_from: record.restored_from.clone(),
                    ..ClusterRecord::bootstrapping(
                        format!("{}-{}", settings.cluster_name, next.id),
                        next.id.clone(),
                        obs.now,
                    )
                },
            },
            None => Step::Wait(Wait::NoSeed),
        }),
    }
}

/// The seed held at launch: its config (state `new`, itself alone; a restored generation's
/// snapshot), then waiting for it to start, or abandoning it once it had its time.
fn seed_step(
    obs: &Observation,
    settings: &Settings,
    record: &ClusterRecord,
    seed: &crate::model::Instance,
) -> Step {
    let Some(address) = seed.address.as_deref() else {
        return Step::Wait(Wait::SeedStarting {
            instance: seed.id.clone(),
        });
    };
    let Some(version) = seed.etcd_version else {
        return Step::Wait(Wait::VersionUnknown {
            instance: seed.id.clone(),
        });
    };
    let t = &settings.topology;
    let initial_cluster = vec![(seed.id.clone(), t.peer_url(address))];
    let token = record.token.clone();
    let config = MemberConfig {
        restore: record.restored_from.as_ref().map(|r| r.snapshot.clone()),
        ..t.member_config(
            &seed.id,
            address,
            initial_cluster,
            InitialState::New,
            token,
            Some(version),
        )
    };
    match obs.published.members.get(&seed.id) {
        Some(p) if p.config == config => {
            if obs.now - p.published_at > settings.learner_start_timeout_secs {
                // A seed that never serves is abandoned like a learner; the record is then
                // re-seeded from another instance.
                Step::Complete {
                    instance: seed.id.clone(),
                    transition: Transition::Launch,
                    result: ActionResult::Abandon,
                }
            } else {
                Step::Wait(Wait::SeedStarting {
                    instance: seed.id.clone(),
                })
            }
        }
        _ => Step::Publish {
            instance: seed.id.clone(),
            instance_arn: seed.arn.clone(),
            certificate: certificate(obs, settings, &seed.id, address),
            config,
        },
    }
}

/// With no cluster that ever served, a leaving instance has no member to remove: let it go
/// (unpublishing its config first).
fn release_terminations(obs: &Observation, settings: &Settings) -> Option<Step> {
    let leaving = by_age(&obs.instances)
        .into_iter()
        .find(|i| i.state == LifecycleState::TerminatingWait)?;
    Some(if obs.published.members.contains_key(&leaving.id) {
        unpublish(obs, settings, &leaving.id)
    } else {
        Step::Complete {
            instance: leaving.id.clone(),
            transition: Transition::Terminate,
            result: ActionResult::Continue,
        }
    })
}
