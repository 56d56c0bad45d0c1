//! The decision: from one observation, the next safe step. Pure: no I/O, no clock.
//!
//! Rules, in the order they are tried (the first that has something to do wins; a rule that can
//! only wait lets later rules act, and its wait is reported when nobody acts):
//! 1. bootstrap exactly once, when no member answers (create-only cluster record, then the seed);
//! 2. remove a terminating instance's member while it is alive (moving leadership away first);
//! 3. complete launch actions of started voters (CONTINUE), and of instances whose learner was
//!    removed (ABANDON, so the group replaces them);
//! 4. the one learner: publish its config, promote it once started, remove it if it never starts;
//! 5. remove members whose instance left the group, if the remaining voters keep quorum;
//! 6. join the next instance as a learner, only when no learner exists and every voter started;
//! 7. delete published configs of instances that are gone.

use crate::config::Settings;
use crate::model::{
    ActionResult, ClusterRecord, ClusterState, ClusterView, InitialState, Instance, LifecycleState,
    Member, MemberConfig, MemberId, Observation, Transition,
};

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Step {
    CreateCluster(ClusterRecord),
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
    Wait(Wait),
    Idle,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Removal {
    Terminating,
    LearnerNeverStarted,
    InstanceGone,
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
    /// Removing this member would leave fewer healthy voters than a quorum.
    QuorumGuard {
        member: MemberId,
    },
    VoterNotStarted {
        member: MemberId,
    },
}

impl Step {
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateCluster(_) => "create-cluster",
            Self::Publish { .. } => "publish-config",
            Self::AddLearner { .. } => "add-learner",
            Self::Promote { .. } => "promote",
            Self::TransferLeadership { .. } => "transfer-leadership",
            Self::RemoveMember { .. } => "remove-member",
            Self::Unpublish { .. } => "unpublish-config",
            Self::Complete { .. } => "complete-lifecycle-action",
            Self::Wait(_) => "wait",
            Self::Idle => "idle",
        }
    }

    pub fn instance(&self) -> Option<&str> {
        match self {
            Self::CreateCluster(r) => Some(&r.seed),
            Self::Publish { instance, .. }
            | Self::AddLearner { instance, .. }
            | Self::Promote { instance, .. }
            | Self::Unpublish { instance }
            | Self::Complete { instance, .. } => Some(instance),
            Self::RemoveMember { instance, .. } => instance.as_deref(),
            Self::Wait(Wait::SeedStarting { instance } | Wait::LearnerStarting { instance }) => {
                Some(instance)
            }
            _ => None,
        }
    }

    pub fn member(&self) -> Option<MemberId> {
        match self {
            Self::Promote { member, .. } | Self::RemoveMember { member, .. } => Some(*member),
            Self::TransferLeadership { from, .. } => Some(*from),
            Self::Wait(Wait::QuorumGuard { member } | Wait::VoterNotStarted { member }) => {
                Some(*member)
            }
            _ => None,
        }
    }
}

pub fn plan(obs: &Observation, settings: &Settings) -> Step {
    let view = match &obs.cluster {
        ClusterState::Unreachable { detail } => return without_cluster(obs, settings, detail),
        ClusterState::Known(view) => view,
    };
    let p = Planner {
        obs,
        settings,
        view,
    };
    // Every rule is a cheap pure function: evaluating all keeps the priority order plain.
    let candidates = [
        p.terminations(),
        p.launch_completions(),
        p.learner(),
        p.orphans(),
        p.joins(),
        p.stale_configs(),
    ];
    let mut waiting = None;
    for step in candidates.into_iter().flatten() {
        match step {
            Step::Wait(_) => {
                waiting.get_or_insert(step);
            }
            step => return step,
        }
    }
    waiting.unwrap_or(Step::Idle)
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

fn by_age(instances: &[Instance]) -> Vec<&Instance> {
    let mut v: Vec<&Instance> = instances.iter().collect();
    v.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
    v
}

fn without_cluster(obs: &Observation, settings: &Settings, detail: &str) -> Step {
    let Some(record) = &obs.published.cluster else {
        // No record and nobody answering: a brand-new cluster. The seed is a pure function of
        // the group, so every racing invocation picks the same one; the create-only write decides.
        // Only a launching instance may seed: one in service may run etcd we cannot reach.
        return by_age(&obs.instances)
            .into_iter()
            .find(|i| i.state.is_launching() && i.address.is_some())
            .map(|seed| {
                Step::CreateCluster(ClusterRecord {
                    token: format!("{}-{}", settings.cluster_name, seed.id),
                    seed: seed.id.clone(),
                    created_at: obs.now,
                })
            })
            .unwrap_or(Step::Idle);
    };
    // Bootstrap is under way only while the seed is still held at launch: its action completes
    // once it is a started voter, so a seed in service means the cluster existed and is now out
    // of reach. Publishing a `new` config then could found a second cluster.
    let seed = obs
        .instance(&record.seed)
        .filter(|i| i.state.is_launching());
    match seed.and_then(|i| i.address.as_deref().map(|a| (i, a))) {
        Some((seed, address)) => {
            let t = &settings.topology;
            let initial_cluster = vec![(seed.id.clone(), t.peer_url(address))];
            let token = record.token.clone();
            let config =
                t.member_config(&seed.id, address, initial_cluster, InitialState::New, token);
            match obs.published.members.get(&seed.id) {
                Some(p) if p.config == config => Step::Wait(Wait::SeedStarting {
                    instance: seed.id.clone(),
                }),
                _ => Step::Publish {
                    instance: seed.id.clone(),
                    config,
                },
            }
        }
        None => Step::Wait(Wait::ClusterUnreachable {
            detail: detail.to_string(),
        }),
    }
}

struct Planner<'a> {
    obs: &'a Observation,
    settings: &'a Settings,
    view: &'a ClusterView,
}

impl<'a> Planner<'a> {
    fn peer_url(&self, i: &Instance) -> Option<String> {
        i.address
            .as_deref()
            .map(|a| self.settings.topology.peer_url(a))
    }

    fn matches(&self, m: &Member, i: &Instance) -> bool {
        (m.is_started() && m.name == i.id)
            || self.peer_url(i).is_some_and(|u| m.peer_urls.contains(&u))
    }

    fn member_of(&self, i: &Instance) -> Option<&'a Member> {
        self.view.members.iter().find(|m| self.matches(m, i))
    }

    fn instance_of(&self, m: &Member) -> Option<&'a Instance> {
        self.obs.instances.iter().find(|i| self.matches(m, i))
    }

    fn terminations(&self) -> Option<Step> {
        let leaving = by_age(&self.obs.instances)
            .into_iter()
            .find(|i| i.state == LifecycleState::TerminatingWait)?;
        if let Some(m) = self.member_of(leaving) {
            let last_voter = !m.is_learner && self.view.voters().count() == 1;
            if !last_voter {
                // Only a leader that answers can hand over; a hung one loses leadership to an
                // election anyway, and the removal goes to another member.
                let healthy_leader = self.view.leader == Some(m.id)
                    && !m.is_learner
                    && self.view.healthy.contains(&m.id);
                if healthy_leader {
                    if let (Some(to), Some(endpoint)) =
                        (self.transferee(m.id), m.client_urls.first())
                    {
                        return Some(Step::TransferLeadership {
                            from: m.id,
                            to,
                            leader_endpoint: endpoint.clone(),
                        });
                    }
                }
                return Some(Step::RemoveMember {
                    member: m.id,
                    instance: Some(leaving.id.clone()),
                    reason: Removal::Terminating,
                });
            }
        }
        if self.obs.published.members.contains_key(&leaving.id) {
            return Some(Step::Unpublish {
                instance: leaving.id.clone(),
            });
        }
        Some(Step::Complete {
            instance: leaving.id.clone(),
            transition: Transition::Terminate,
            result: ActionResult::Continue,
        })
    }

    /// A started, healthy voter that is staying.
    fn transferee(&self, from: MemberId) -> Option<MemberId> {
        self.view
            .voters()
            .filter(|v| v.id != from && v.is_started() && self.view.healthy.contains(&v.id))
            .filter(|v| {
                self.instance_of(v)
                    .is_some_and(|i| i.state != LifecycleState::TerminatingWait)
            })
            .map(|v| v.id)
            .min()
    }

    fn launch_completions(&self) -> Option<Step> {
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
    }

    fn learner(&self) -> Option<Step> {
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

    fn orphans(&self) -> Option<Step> {
        let mut voters: Vec<&Member> = self.view.voters().collect();
        voters.sort_by_key(|m| m.id);
        let orphan = voters
            .iter()
            .find(|m| self.instance_of(m).is_none_or(|i| !i.state.is_present()))?;
        let remaining = voters.len() - 1;
        let healthy_remaining = voters
            .iter()
            .filter(|v| v.id != orphan.id && self.view.healthy.contains(&v.id))
            .count();
        if remaining >= 1 && healthy_remaining > remaining / 2 {
            Some(Step::RemoveMember {
                member: orphan.id,
                instance: self.instance_of(orphan).map(|i| i.id.clone()),
                reason: Removal::InstanceGone,
            })
        } else {
            Some(Step::Wait(Wait::QuorumGuard { member: orphan.id }))
        }
    }

    fn joins(&self) -> Option<Step> {
        if self.view.learners().next().is_some() {
            return None;
        }
        if let Some(v) = self.view.voters().find(|v| !v.is_started()) {
            return Some(Step::Wait(Wait::VoterNotStarted { member: v.id }));
        }
        by_age(&self.obs.instances)
            .into_iter()
            .filter(|i| i.state.wants_membership() && self.member_of(i).is_none())
            // A published config without a member means it was removed: rule 3 abandons held
            // instances; one already in service needs an operator, not a silent second join.
            .filter(|i| !self.obs.published.members.contains_key(&i.id))
            .find_map(|i| {
                Some(Step::AddLearner {
                    instance: i.id.clone(),
                    peer_url: self.peer_url(i)?,
                })
            })
    }

    fn stale_configs(&self) -> Option<Step> {
        self.obs
            .published
            .members
            .keys()
            .find(|id| self.obs.instance(id).is_none_or(|i| !i.state.is_present()))
            .map(|id| Step::Unpublish {
                instance: id.clone(),
            })
    }
}

#[cfg(test)]
mod tests;
