//! What every rule asks of one observation of a cluster that answers: which member is which
//! instance's, who answers, whether a removal keeps the quorum, where a call should go.

use super::step::{MemberCertificate, Step};
use crate::config::Settings;
use crate::model::{quorum, ClusterView, Instance, Member, MemberId, Observation};

/// One observation with a cluster that answers, and the settings: what the rules read.
pub struct Context<'a> {
    pub obs: &'a Observation,
    pub settings: &'a Settings,
    pub view: &'a ClusterView,
}

impl<'a> Context<'a> {
    pub fn peer_url(&self, i: &Instance) -> Option<String> {
        i.address
            .as_deref()
            .map(|a| self.settings.topology.peer_url(a))
    }

    /// A started member is its instance by name alone: an address can be reused by a new
    /// instance after its old one died. Only a member that has not started yet (and so has no
    /// name) is known by the peer URL it was added with.
    pub fn matches(&self, m: &Member, i: &Instance) -> bool {
        if m.is_started() {
            m.name == i.id
        } else {
            self.peer_url(i).is_some_and(|u| m.peer_urls.contains(&u))
        }
    }

    pub fn member_of(&self, i: &Instance) -> Option<&'a Member> {
        self.view.members.iter().find(|m| self.matches(m, i))
    }

    pub fn instance_of(&self, m: &Member) -> Option<&'a Instance> {
        self.obs.instances.iter().find(|i| self.matches(m, i))
    }

    pub fn healthy(&self, m: &Member) -> bool {
        self.view.healthy.contains(&m.id)
    }

    /// Voters other than `m` whose etcd answered.
    fn healthy_voters_but(&self, m: MemberId) -> usize {
        self.view
            .voters()
            .filter(|v| v.id != m && self.view.healthy.contains(&v.id))
            .count()
    }

    /// etcd's own rule (`--strict-reconfig-check`): a voter may go when the voters that stay and
    /// answer are a quorum of the voters that stay. A learner may always go.
    pub fn removal_keeps_quorum(&self, m: &Member) -> bool {
        if m.is_learner {
            return true;
        }
        let staying = self.view.voters().count() - 1;
        staying >= 1 && self.healthy_voters_but(m.id) >= quorum(staying)
    }

    pub fn down_voters(&self) -> Vec<MemberId> {
        self.view
            .voters()
            .filter(|v| !self.healthy(v))
            .map(|v| v.id)
            .collect()
    }

    /// The cluster token of the current generation.
    pub fn token(&self) -> String {
        self.obs
            .published
            .cluster
            .as_ref()
            .map_or_else(|| self.settings.cluster_name.clone(), |r| r.token.clone())
    }

    /// Where a membership call goes: the voter that answered the member list, unless that is
    /// `avoid` (the member being removed) and another healthy voter can take the call.
    pub fn endpoint_avoiding(&self, avoid: Option<MemberId>) -> String {
        let view = self.view;
        let answering_is_avoided = avoid
            .and_then(|id| view.member(id))
            .is_some_and(|m| m.client_urls.contains(&view.endpoint));
        if !answering_is_avoided {
            return view.endpoint.clone();
        }
        view.voters()
            .filter(|m| Some(m.id) != avoid && view.healthy.contains(&m.id))
            .find_map(|m| m.client_urls.first().cloned())
            .unwrap_or_else(|| view.endpoint.clone())
    }

    /// The leader's client URL, else the answering voter's.
    pub fn leader_endpoint(&self) -> String {
        let v = self.view;
        v.leader
            .and_then(|l| v.member(l))
            .and_then(|m| m.client_urls.first().cloned())
            .unwrap_or_else(|| v.endpoint.clone())
    }
}

/// Oldest first (ties by instance id): every racing invocation sees the same order.
pub fn by_age(instances: &[Instance]) -> Vec<&Instance> {
    let mut v: Vec<&Instance> = instances.iter().collect();
    v.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
    v
}

/// The oldest launching, healthy instance with an address: every racing invocation picks the same.
pub fn seed_candidate<'a>(obs: &'a Observation, except: Option<&str>) -> Option<&'a Instance> {
    by_age(&obs.instances).into_iter().find(|i| {
        i.state.is_launching() && i.healthy && i.address.is_some() && Some(i.id.as_str()) != except
    })
}

/// Delete an instance's config, and its key material with TLS=managed or wherever a certificate
/// end says there is some (TLS turned off since: left, cleanup would plan it forever).
pub fn unpublish(obs: &Observation, settings: &Settings, instance: &str) -> Step {
    Step::Unpublish {
        instance: instance.to_string(),
        key_material: settings.member_cert_secs.is_some()
            || obs.published.cert_not_after.contains_key(instance)
            || obs.published.issuing.contains(instance),
    }
}

/// TLS=managed: whether a certificate must be issued before `instance`'s config is published:
/// not when its bundle is already handed out (a config published again finds its bundle in
/// place, and a key is not generated only to be thrown away).
pub fn needs_certificate(obs: &Observation, settings: &Settings, instance: &str) -> bool {
    settings.member_cert_secs.is_some() && !obs.published.cert_not_after.contains_key(instance)
}

/// The certificate for an instance at `address`, if one must be issued (`needs_certificate`).
pub fn certificate(
    obs: &Observation,
    settings: &Settings,
    instance: &str,
    address: &str,
) -> Option<MemberCertificate> {
    needs_certificate(obs, settings, instance).then(|| MemberCertificate {
        address: address.to_string(),
    })
}
