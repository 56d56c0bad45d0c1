//! The fake's etcd: the membership rules that matter here (one learner, promote only started
//! learners, not-found on a second remove), maintenance, authentication and snapshots, streamed
//! in chunks or stalled (`Members`).

use super::*;

/// A snapshot streamed in small chunks.
struct Chunks(Vec<Vec<u8>>);

impl SnapshotStream for Chunks {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        let next = (!self.0.is_empty()).then(|| self.0.remove(0));
        Box::pin(async move { Ok(next) })
    }
}

/// A snapshot that sends one chunk and then never another.
struct Stalls(bool);

impl SnapshotStream for Stalls {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        let first = !std::mem::replace(&mut self.0, true);
        Box::pin(async move {
            if first {
                Ok(Some(b"first".to_vec()))
            } else {
                std::future::pending().await
            }
        })
    }
}

/// The view a quorum of the fake's members gives, answered at `endpoint`.
fn view(w: &crate::fake::World, endpoint: &str, cluster_id: u64) -> ClusterView {
    ClusterView {
        cluster_id,
        members: w.members.clone(),
        leader: w
            .members
            .iter()
            .find(|m| !m.is_learner && w.live(m))
            .map(|m| m.id),
        healthy: w
            .members
            .iter()
            .filter(|m| w.reachable(m))
            .map(|m| m.id)
            .collect(),
        endpoint: endpoint.to_string(),
        statuses: w
            .members
            .iter()
            .filter(|m| w.reachable(m))
            .map(|m| (m.id, w.db.get(&m.id).cloned().unwrap_or_default()))
            .collect(),
        alarms: w.alarms.clone(),
        history_compacted: w.compacted > 0
            && w.compacted >= w.db.values().map(|s| s.revision).max().unwrap_or(0),
        auth_enabled: w.auth_enabled,
        root_refused: w.root_refused.clone(),
        token_kinds: vec![],
        cluster_version: Some(crate::model::Version::new(3, 6, 0)),
        peer_connected: w
            .members
            .iter()
            .filter(|m| w.live(m) && w.cut_off.contains(&m.name))
            .map(|m| m.id)
            .collect(),
        defragmented: Default::default(),
    }
}

impl Members for Fake {
    async fn observe(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        let w = self.world();
        let cluster_id = u64::from(w.clusters_formed);
        let answering = w
            .members
            .iter()
            .filter(|m| !m.is_learner && w.reachable(m))
            .filter(|_| cluster.is_none_or(|c| c == cluster_id))
            .find_map(|m| m.client_urls.iter().find(|u| endpoints.contains(u)));
        // A quorum of voters alive, or there is no leader and nobody is believed.
        let voters = w.members.iter().filter(|m| !m.is_learner).count();
        let live_voters = w
            .members
            .iter()
            .filter(|m| !m.is_learner && w.live(m))
            .count();
        match answering {
            Some(endpoint) if live_voters > voters / 2 => {
                ClusterState::Known(Box::new(view(&w, endpoint, cluster_id)))
            }
            // No quorum: the members still alive answer for themselves (status, local list).
            _ => ClusterState::Unreachable {
                detail: "no endpoint answered".into(),
                survivors: w
                    .members
                    .iter()
                    .filter(|m| w.live(m) && cluster.is_none_or(|c| c == cluster_id))
                    .filter_map(|m| {
                        Some(crate::model::Survivor {
                            member: m.id,
                            name: m.name.clone(),
                            is_learner: m.is_learner,
                            endpoint: m.client_urls.first()?.clone(),
                            cluster_id,
                            status: w.db.get(&m.id).cloned().unwrap_or_default(),
                            voters: w
                                .members
                                .iter()
                                .filter(|v| !v.is_learner)
                                .cloned()
                                .collect(),
                        })
                    })
                    .collect(),
            },
        }
    }

    fn identify(&self, _ca: &Ca) -> Result<(), Error> {
        Ok(())
    }

    fn use_root_password(&self, _password: Password, _login_first: &[String]) {}

    async fn add_learner(&self, _endpoint: &str, peer_url: &str) -> Result<MemberId, Error> {
        let mut w = self.world();
        w.calls.push(format!("add-learner {peer_url}"));
        if let Some(r) = w.refuse {
            return Err(refused("add", r));
        }
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

    /// etcd's strict reconfiguration check: an active voter may go only when the other active
    /// voters are a quorum of those that stay; a downed one when the started others are.
    async fn remove(&self, _endpoint: &str, id: MemberId) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("remove {id}"));
        if let Some(r) = w.refuse {
            return Err(refused("remove", r));
        }
        let Some(m) = w.members.iter().find(|m| m.id == id).cloned() else {
            return Err(refused("remove", Refusal::MemberNotFound));
        };
        if !m.is_learner {
            let others: Vec<&Member> = w
                .members
                .iter()
                .filter(|o| !o.is_learner && o.id != id)
                .collect();
            let quorum = others.len() / 2 + 1;
            let started = others.iter().filter(|o| o.is_started()).count();
            let active = others.iter().filter(|o| w.live(o)).count();
            if started < quorum {
                return Err(refused("remove", Refusal::NotEnoughStartedMembers));
            }
            if w.live(&m) && active < quorum {
                return Err(refused("remove", Refusal::UnhealthyCluster));
            }
        }
        w.members.retain(|m| m.id != id);
        Ok(())
    }

    async fn compact(&self, _endpoint: &str, revision: i64) -> Result<Compacted, Error> {
        let mut w = self.world();
        w.calls.push(format!("compact {revision}"));
        if revision <= w.compacted {
            return Ok(Compacted::Already);
        }
        w.compacted = revision;
        let live = w.live_bytes;
        let reading = w.reading.clone();
        for (id, s) in w.db.iter_mut() {
            if !reading.contains(id) {
                s.db_size_in_use = live.min(s.db_size);
            }
        }
        Ok(Compacted::Now)
    }

    async fn defragment(&self, endpoint: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("defragment {endpoint}"));
        let id = w
            .members
            .iter()
            .find(|m| m.client_urls.iter().any(|u| u == endpoint))
            .map(|m| m.id)
            .ok_or_else(|| refused("defragment", Refusal::MemberNotFound))?;
        let live = w.live_bytes;
        let stale = w.compacted > 0 && w.reading.remove(&id);
        if let Some(s) = w.db.get_mut(&id) {
            if stale {
                s.db_size_in_use = live.min(s.db_size);
            }
            s.db_size = s.db_size_in_use;
        }
        Ok(())
    }

    async fn snapshot(&self, endpoint: &str) -> Result<Snapshot, Error> {
        let mut w = self.world();
        w.calls.push(format!("snapshot {endpoint}"));
        if w.snapshot_stalls {
            return Ok(Box::new(Stalls(false)));
        }
        let member = w
            .members
            .iter()
            .find(|m| m.client_urls.iter().any(|u| u == endpoint))
            .map(|m| m.id);
        if let Some(id) = member.filter(|_| w.snapshot_moves_revision) {
            let status = w.db.entry(id).or_default();
            status.revision += 1;
            let moved = status.revision;
            w.snapshot_holds = Some(moved);
        }
        let data = w.data.clone();
        Ok(Box::new(Chunks(
            data.into_bytes().chunks(4).map(<[u8]>::to_vec).collect(),
        )))
    }

    async fn disarm(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("disarm {} {}", alarm.kind, alarm.member));
        w.alarms.retain(|a| a != alarm);
        Ok(())
    }

    async fn raise(&self, _endpoint: &str, alarm: &Alarm) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("raise {} {}", alarm.kind, alarm.member));
        if !w.alarms.contains(alarm) {
            w.alarms.push(alarm.clone());
        }
        Ok(())
    }

    async fn enable_auth(&self, _endpoint: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push("enable-auth".into());
        w.auth_enabled = true;
        Ok(())
    }

    async fn grant_prefix(&self, _endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("grant {} {}", grant.user, grant.prefix));
        w.grants.push(grant.clone());
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
