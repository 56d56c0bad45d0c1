//! An in-memory world behind all four ports, for handler tests. Its etcd keeps the membership
//! rules that matter here (one learner, promote only started learners, not-found on a second
//! remove) and its lifecycle hooks answer "not pending" on a second completion. Every mutating
//! call is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Refusal};
use crate::model::*;
use crate::ports::*;

#[derive(Default)]
pub struct World {
    pub instances: Vec<Instance>,
    pub members: Vec<Member>,
    pub record: Option<ClusterRecord>,
    pub configs: BTreeMap<String, Published>,
    pub calls: Vec<String>,
    pub now: Timestamp,
    next_member: u64,
    /// Clusters ever formed: more than one is split brain.
    pub clusters_formed: u32,
    /// Every etcd process unreachable (a network partition from the function's point of view).
    pub etcd_down: bool,
}

#[derive(Clone, Default)]
pub struct Fake(pub Arc<Mutex<World>>);

fn refused(operation: &'static str, refusal: Refusal) -> Error {
    Error::EtcdRefused {
        operation,
        refusal,
        message: format!("{refusal:?}"),
    }
}

impl Fake {
    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.0.lock().unwrap()
    }

    /// Mutating calls made so far.
    pub fn calls(&self) -> Vec<String> {
        self.world().calls.clone()
    }

    pub fn launch(&self, n: u8) -> String {
        let mut w = self.world();
        let id = format!("i-0000000{n}");
        let launched_at = w.now;
        w.instances.push(Instance {
            id: id.clone(),
            state: LifecycleState::PendingWait,
            address: Some(format!("10.0.0.{n}")),
            launched_at,
        });
        id
    }

    pub fn start_terminating(&self, id: &str) {
        let mut w = self.world();
        let i = w.instances.iter_mut().find(|i| i.id == id).unwrap();
        i.state = LifecycleState::TerminatingWait;
    }

    /// What each instance's boot script does: read its published config, start etcd with it.
    pub fn boot(&self) {
        let mut w = self.world();
        let w = &mut *w;
        for inst in w.instances.iter().filter(|i| i.state.wants_membership()) {
            let Some(p) = w.configs.get(&inst.id) else {
                continue;
            };
            let c = &p.config;
            match c.state {
                InitialState::New if w.members.is_empty() => {
                    w.next_member += 1;
                    w.clusters_formed += 1;
                    w.members.push(Member {
                        id: MemberId(w.next_member),
                        name: c.name.clone(),
                        peer_urls: vec![c.peer_url.clone()],
                        client_urls: vec![c.client_url.clone()],
                        is_learner: false,
                    });
                }
                InitialState::Existing => {
                    // etcd refuses to start unless initial-cluster matches the member list.
                    let mut want: Vec<&String> = c.initial_cluster.iter().map(|(_, u)| u).collect();
                    let mut have: Vec<&String> =
                        w.members.iter().flat_map(|m| &m.peer_urls).collect();
                    want.sort();
                    have.sort();
                    if want != have {
                        continue;
                    }
                    if let Some(m) = w
                        .members
                        .iter_mut()
                        .find(|m| m.peer_urls.contains(&c.peer_url) && !m.is_started())
                    {
                        m.name = c.name.clone();
                        m.client_urls = vec![c.client_url.clone()];
                    }
                }
                _ => {}
            }
        }
    }
}

impl Group for Fake {
    async fn instances(&self) -> Result<Vec<Instance>, Error> {
        Ok(self.world().instances.clone())
    }
}

impl Lifecycle for Fake {
    async fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> Result<Completion, Error> {
        let mut w = self.world();
        w.calls.push(format!(
            "complete {transition} {instance} {}",
            result.as_str()
        ));
        let Some(pos) = w.instances.iter().position(|i| i.id == instance) else {
            return Ok(Completion::NotPending);
        };
        match (transition, &w.instances[pos].state, result) {
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Continue) => {
                w.instances[pos].state = LifecycleState::InService;
            }
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Abandon)
            | (Transition::Terminate, LifecycleState::TerminatingWait, _) => {
                w.instances.remove(pos);
            }
            _ => return Ok(Completion::NotPending),
        }
        Ok(Completion::Done)
    }

    async fn heartbeat(&self, instance: &str, transition: Transition) -> Result<Completion, Error> {
        self.world()
            .calls
            .push(format!("heartbeat {transition} {instance}"));
        Ok(Completion::Done)
    }
}

impl PublishedConfig for Fake {
    async fn load(&self) -> Result<PublishedState, Error> {
        let w = self.world();
        Ok(PublishedState {
            cluster: w.record.clone(),
            members: w.configs.clone(),
        })
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("create-cluster seed {}", record.seed));
        if w.record.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(record.clone());
        Ok(Created::Created)
    }

    async fn publish(&self, instance: &str, config: &MemberConfig) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("publish {instance}"));
        let published_at = w.now;
        w.configs.insert(
            instance.to_string(),
            Published {
                config: config.clone(),
                published_at,
            },
        );
        Ok(())
    }

    async fn unpublish(&self, instance: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("unpublish {instance}"));
        w.configs.remove(instance);
        Ok(())
    }
}

impl Members for Fake {
    async fn observe(&self, endpoints: &[String]) -> ClusterState {
        let w = self.world();
        let live = |m: &Member| {
            m.is_started()
                && w.instances
                    .iter()
                    .any(|i| i.id == m.name && i.state.is_present())
        };
        let answering = w
            .members
            .iter()
            .filter(|_| !w.etcd_down)
            .filter(|m| !m.is_learner && live(m))
            .find_map(|m| m.client_urls.iter().find(|u| endpoints.contains(u)));
        match answering {
            None => ClusterState::Unreachable {
                detail: "no endpoint answered".into(),
            },
            Some(endpoint) => ClusterState::Known(ClusterView {
                cluster_id: 1,
                members: w.members.clone(),
                leader: w
                    .members
                    .iter()
                    .find(|m| !m.is_learner && live(m))
                    .map(|m| m.id),
                healthy: w.members.iter().filter(|m| live(m)).map(|m| m.id).collect(),
                endpoint: endpoint.clone(),
            }),
        }
    }

    async fn add_learner(&self, _endpoint: &str, peer_url: &str) -> Result<MemberId, Error> {
        let mut w = self.world();
        w.calls.push(format!("add-learner {peer_url}"));
        if w.members.iter().any(|m| m.is_learner) {
            return Err(refused("add", Refusal::TooManyLearners));
        }
        if w.members
            .iter()
            .any(|m| m.peer_urls.iter().any(|u| u == peer_url))
        {
            return Err(refused("add", Refusal::PeerUrlExists));
        }
        w.next_member += 1;
        let id = MemberId(w.next_member);
        w.members.push(Member {
            id,
            name: String::new(),
            peer_urls: vec![peer_url.to_string()],
            client_urls: vec![],
            is_learner: true,
        });
        Ok(id)
    }

    async fn promote(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("promote {id}"));
        let m = w
            .members
            .iter_mut()
            .find(|m| m.id == id)
            .ok_or_else(|| refused("promote", Refusal::MemberNotFound))?;
        if !m.is_learner {
            return Err(refused("promote", Refusal::NotALearner));
        }
        if !m.is_started() {
            return Err(refused("promote", Refusal::LearnerNotInSync));
        }
        m.is_learner = false;
        Ok(())
    }

    async fn remove(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("remove {id}"));
        let before = w.members.len();
        w.members.retain(|m| m.id != id);
        if w.members.len() == before {
            return Err(refused("remove", Refusal::MemberNotFound));
        }
        Ok(())
    }

    async fn transfer_leadership(&self, _leader: &str, to: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("transfer-leadership {to}"));
        // Leadership goes to the first live voter: move the transferee to the front.
        let pos = w
            .members
            .iter()
            .position(|m| m.id == to)
            .ok_or_else(|| refused("transfer", Refusal::BadLeaderTransferee))?;
        let m = w.members.remove(pos);
        w.members.insert(0, m);
        Ok(())
    }
}
