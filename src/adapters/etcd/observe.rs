//! Observing the cluster: the member list from a voter that knows a leader, each started
//! member's own status, the alarms, the peers' view of members that do not answer the function,
//! and, with no quorum, what each member says of itself.

use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::gateway::{call_with, AlarmResponse, ListResponse, StatusResponse};
use super::{EtcdMembers, HEALTH_TIMEOUT};
use crate::error::{Error, Refusal};
use crate::model::{Alarm, ClusterState, ClusterView, Member, MemberId, MemberStatus, Survivor};

/// The members a `/metrics` page reports an active raft connection to: the `Remote` label
/// (a member id in hex) of each `etcd_network_active_peers` sample of 1 or more.
fn active_peers(text: &str) -> impl Iterator<Item = MemberId> + '_ {
    text.lines().filter_map(|line| {
        let rest = line.strip_prefix("etcd_network_active_peers{")?;
        let (labels, value) = rest.split_once('}')?;
        if value.trim().parse::<f64>().ok()? < 1.0 {
            return None;
        }
        let remote = labels
            .split(',')
            .find_map(|kv| kv.trim().strip_prefix("Remote=\""))?
            .trim_end_matches('"');
        u64::from_str_radix(remote, 16).ok().map(MemberId)
    })
}

impl EtcdMembers {
    /// The second view of members that did not answer the function: which of `down` an
    /// answering member reports an active raft connection to. etcd's rafthttp keeps the gauge
    /// `etcd_network_active_peers{Local,Remote}` at 1 while the stream to a peer works and sets
    /// it to 0 when the peer stops answering (a dead process at once, a hung one after the
    /// stream's 5 s read timeout):
    /// https://github.com/etcd-io/etcd/blob/v3.5.30/server/etcdserver/api/rafthttp/peer_status.go
    /// Best effort: a member whose metrics cannot be read adds nothing.
    async fn peer_view(
        &self,
        members: &[Member],
        healthy: &std::collections::BTreeSet<MemberId>,
        down: &[MemberId],
    ) -> std::collections::BTreeSet<MemberId> {
        let mut connected = std::collections::BTreeSet::new();
        let Ok(client) = self.client() else {
            return connected;
        };
        for m in members.iter().filter(|m| healthy.contains(&m.id)) {
            let Some(client_url) = m.client_urls.first() else {
                continue;
            };
            // The metrics port first (the stack's members serve it), then the client URL:
            // etcd serves /metrics there too, and an adopted member serves no metrics port.
            let mut page = None;
            for url in self.metrics_urls(client_url) {
                let text = async {
                    client
                        .get(url.clone())
                        .timeout(HEALTH_TIMEOUT)
                        .send()
                        .await?
                        .error_for_status()?
                        .text()
                        .await
                };
                match text.await {
                    Ok(text) => {
                        page = Some(text);
                        break;
                    }
                    Err(e) => tracing::debug!(%url, error = %e, "peer view: metrics unreadable"),
                }
            }
            if let Some(text) = page {
                let seen: Vec<MemberId> =
                    active_peers(&text).filter(|id| down.contains(id)).collect();
                if !seen.is_empty() {
                    // Which member vouches for which: a dead member kept from replacement
                    // by a stale gauge would be named here.
                    tracing::info!(reporter = %m.id, connected = ?seen,
                        "peer view: a member that does not answer the function has an active raft connection");
                }
                connected.extend(seen);
            }
            if down.iter().all(|d| connected.contains(d)) {
                break;
            }
        }
        connected
    }

    /// The cluster version, `etcdcluster` of the member's `/version`
    /// (<https://etcd.io/docs/v3.6/op-guide/monitoring/>; `server/etcdserver/api/etcdhttp/version.go`):
    /// the lowest minor the members run, which the leader raises once every member runs a newer
    /// one (`not_decided` until it has decided). Best effort: None if unreadable.
    async fn cluster_version(&self, endpoint: &str) -> Option<crate::model::Version> {
        #[derive(serde::Deserialize)]
        struct Versions {
            etcdcluster: String,
        }
        let url = reqwest::Url::parse(endpoint).ok()?.join("/version").ok()?;
        let answer = async {
            self.client()
                .ok()?
                .get(url)
                .timeout(HEALTH_TIMEOUT)
                .send()
                .await
                .ok()?
                .json::<Versions>()
                .await
                .ok()
        };
        let versions = answer.await;
        if versions.is_none() {
            tracing::debug!(endpoint, "cluster version unreadable");
        }
        versions?.etcdcluster.parse().ok()
    }

    /// Where a member's `/metrics` is read: on the metrics port in plain HTTP when the stack
    /// has one (TLS=managed's `ETCD_LISTEN_METRICS_URLS`), then on its client URL, which etcd
    /// serves it on too (<https://etcd.io/docs/v3.6/op-guide/monitoring/>): an adopted member
    /// has no metrics port.
    fn metrics_urls(&self, client_url: &str) -> Vec<reqwest::Url> {
        let Ok(mut url) = reqwest::Url::parse(client_url) else {
            return vec![];
        };
        url.set_path("/metrics");
        let mut out = vec![];
        if let Some(port) = self.metrics_port {
            let mut plain = url.clone();
            if plain.set_scheme("http").is_ok() && plain.set_port(Some(port)).is_ok() {
                out.push(plain);
            }
        }
        out.push(url);
        out
    }

    async fn list(&self, endpoint: &str) -> Result<ListResponse, Error> {
        self.call(
            "member list",
            endpoint,
            "/v3/cluster/member/list",
            // 3.5+ answers from the raft log (a partitioned member cannot hand out a stale
            // list); 3.4 ignores the field.
            json!({"linearizable": true}),
            None,
        )
        .await
    }

    /// The member list as one member sees it, believed only from a voter in its own list, of the
    /// expected cluster, that knows a leader.
    async fn view(&self, endpoint: &str, cluster: Option<u64>) -> Result<ClusterView, Error> {
        let list = self.trusted_list(endpoint, cluster).await?;
        let members: Vec<Member> = list.members.into_iter().map(Member::from).collect();
        let probed = self.probe(&members).await?;
        // No `leader` in the answer means there is none: a member without a leader may hold an
        // old list (partitioned, or the quorum is lost), so its list is not believed.
        let leader = probed
            .statuses
            .get(&MemberId(list.header.member_id))
            .map(|s| s.1)
            .filter(|&l| l != 0)
            .map(MemberId)
            .ok_or_else(|| Error::EtcdRefused {
                operation: "member list",
                refusal: Refusal::NoLeader,
                message: "the answering member knows no leader".into(),
            })?;
        let healthy: std::collections::BTreeSet<MemberId> =
            probed.statuses.keys().copied().collect();
        let statuses: std::collections::BTreeMap<MemberId, MemberStatus> = probed
            .statuses
            .into_iter()
            .map(|(id, (s, _))| (id, s))
            .collect();
        let down: Vec<MemberId> = members
            .iter()
            .filter(|m| m.is_started() && !healthy.contains(&m.id))
            .map(|m| m.id)
            .collect();
        let peer_connected = if down.is_empty() {
            Default::default()
        } else {
            self.peer_view(&members, &healthy, &down).await
        };
        let alarms = self.alarms(endpoint).await?;
        let history_compacted = if alarms.iter().any(|a| a.kind == crate::model::NOSPACE) {
            let revision = statuses.values().map(|s| s.revision).max().unwrap_or(0);
            self.compacted_up_to(endpoint, revision).await?
        } else {
            false
        };
        let auth_enabled = match self.root.get() {
            Some(_) => self.auth_enabled(endpoint).await?,
            // Without root tokens, asked only of a cluster that is not ours yet (no record: one
            // to adopt), which an adoption must refuse if it demands a user.
            None if cluster.is_none() => self.auth_enabled(endpoint).await?,
            None => false,
        };
        let root_refused = match cluster {
            None if auth_enabled => self.root_refused(endpoint).await?,
            _ => None,
        };
        let token_kinds = match cluster {
            None if auth_enabled && root_refused.is_none() => self.token_kinds(&members).await,
            _ => vec![],
        };
        let cluster_version = self.cluster_version(endpoint).await;
        Ok(ClusterView {
            root_refused,
            token_kinds,
            cluster_version,
            cluster_id: list.header.cluster_id,
            members,
            statuses,
            alarms,
            history_compacted,
            auth_enabled,
            peer_connected,
            defragmented: Default::default(),
            leader: Some(leader),
            healthy,
            endpoint: endpoint.to_string(),
        })
    }

    /// The member list, only from a member of the expected cluster that is a voter in its own
    /// list (a learner cannot take membership calls; a member missing from its own list was
    /// removed).
    async fn trusted_list(
        &self,
        endpoint: &str,
        cluster: Option<u64>,
    ) -> Result<ListResponse, Error> {
        let list = self.list(endpoint).await?;
        let untrusted = |refusal, message: String| Error::EtcdRefused {
            operation: "member list",
            refusal,
            message,
        };
        if let Some(want) = cluster.filter(|&c| c != list.header.cluster_id) {
            return Err(untrusted(
                Refusal::Other,
                format!(
                    "answered by a member of cluster {:x}, not the record's {want:x}",
                    list.header.cluster_id
                ),
            ));
        }
        match list.members.iter().find(|m| m.id == list.header.member_id) {
            Some(m) if m.is_learner => Err(untrusted(
                Refusal::NotSupportedForLearner,
                "answered by a learner".into(),
            )),
            Some(_) => Ok(list),
            None => Err(untrusted(
                Refusal::Other,
                format!(
                    "answered by member {:x}, which is not in its own list (removed)",
                    list.header.member_id
                ),
            )),
        }
    }

    /// One status call per started member, at once: whether it answers (itself, not another
    /// etcd at a reused address), its own status, and the leader it knows. A status refused for
    /// naming no user while we sent no token is asked again with root's: etcd 3.6.0-3.6.8 answer
    /// MemberList without a user but not Status (from 3.6.0 Status needs a user, etcd-io/etcd#14663;
    /// from 3.6.9 MemberList does too), so the list alone cannot tell that authentication is on.
    /// Members that refuse every token the function signs (an adopted cluster's) are asked
    /// again once it has logged in at them with the adopted cluster's root password.
    async fn probe(&self, members: &[Member]) -> Result<Probed, Error> {
        let (mut probed, asked_for_user, mut refused) = self.probe_once(members).await?;
        if asked_for_user && self.act_as_root() {
            (probed, _, refused) = self.probe_once(members).await?;
        }
        let mut again = false;
        for url in &refused {
            if self.password_known() {
                let client = self.client()?;
                match self.log_in(&client, url, Some(HEALTH_TIMEOUT)).await {
                    Ok(()) => again = true,
                    Err(e) => tracing::warn!(endpoint = %url, error = %e, "cannot log in as root"),
                }
            }
        }
        if again {
            probed = self.probe_once(members).await?.0;
        }
        Ok(probed)
    }

    /// The statuses, whether a member asked for a user, and the URLs that refused the tokens.
    async fn probe_once(&self, members: &[Member]) -> Result<(Probed, bool, Vec<String>), Error> {
        let mut probes = JoinSet::new();
        for m in members.iter().filter(|m| m.is_started()) {
            let id = m.id;
            let urls: Vec<(String, Vec<String>)> = m
                .client_urls
                .iter()
                .map(|u| Ok((u.clone(), self.tokens(u)?)))
                .collect::<Result<_, Error>>()?;
            let client = self.client()?;
            probes.spawn(async move {
                let mut asked_for_user = false;
                let mut refused = Vec::new();
                for (url, tokens) in urls {
                    let path = "/v3/maintenance/status";
                    let (status, tried) = call_with::<StatusResponse>(
                        &client,
                        "status",
                        &url,
                        path,
                        &json!({}),
                        Some(HEALTH_TIMEOUT),
                        &tokens,
                    )
                    .await;
                    // Only the member itself counts: anything else answering at its URL (an
                    // address reused by another etcd) says nothing of its health.
                    match status {
                        Ok(s) if s.header.member_id == id.0 => {
                            return (Some((id, s, url, tried)), false, refused)
                        }
                        Err(e) if tokens.is_empty() && e.refusal() == Some(Refusal::UserEmpty) => {
                            asked_for_user = true;
                            refused.push(url)
                        }
                        Err(e)
                            if matches!(
                                e.refusal(),
                                Some(Refusal::InvalidAuthToken | Refusal::UserEmpty)
                            ) =>
                        {
                            refused.push(url)
                        }
                        _ => {}
                    }
                }
                (None, asked_for_user, refused)
            });
        }
        let mut statuses = std::collections::BTreeMap::new();
        let mut asked_for_user = false;
        let mut refused = Vec::new();
        while let Some(probe) = probes.join_next().await {
            let Ok((found, asked, their_refused)) = probe else {
                continue;
            };
            asked_for_user |= asked;
            refused.extend(their_refused);
            if let Some((id, status, url, tried)) = found {
                self.took(&url, tried);
                statuses.insert(id, (MemberStatus::from(&status), status.leader));
            }
        }
        Ok((Probed { statuses }, asked_for_user, refused))
    }

    /// The cluster's active alarms: raft state, so any member answers for all.
    async fn alarms(&self, endpoint: &str) -> Result<Vec<Alarm>, Error> {
        let alarms: AlarmResponse = self
            .call(
                "alarm list",
                endpoint,
                "/v3/maintenance/alarm",
                json!({"action": "GET"}),
                None,
            )
            .await?;
        Ok(alarms
            .alarms
            .into_iter()
            .filter(|a| !a.alarm.is_empty() && a.alarm != "NONE")
            .map(|a| Alarm {
                member: MemberId(a.member_id),
                kind: a.alarm,
            })
            .collect())
    }

    /// Whether history before `revision` is compacted away: a read at the revision before it is
    /// refused as compacted.
    async fn compacted_up_to(&self, endpoint: &str, revision: i64) -> Result<bool, Error> {
        if revision <= 1 {
            return Ok(true);
        }
        let body =
            json!({"key": "AA==", "revision": (revision - 1).to_string(), "count_only": true});
        match self
            .call::<Value>("range", endpoint, "/v3/kv/range", body, None)
            .await
        {
            Ok(_) => Ok(false),
            Err(e) if e.refusal() == Some(Refusal::AlreadyCompacted) => Ok(true),
            // With authentication on, a read demands the store's exact auth revision, which
            // root tokens do not carry (etcd 3.4 cannot tell it): answer from this process's
            // own compaction instead. A new environment forgets it and compacts again, which etcd
            // answers at once (compacting to a compacted revision is refused as compacted).
            Err(e) if e.refusal() == Some(Refusal::AuthOldRevision) => {
                Ok(*self.compacted_to.lock().unwrap() >= revision)
            }
            Err(e) => Err(e),
        }
    }

    /// A member that answers for itself (the maintenance status and its local member list need
    /// no quorum), of the expected cluster.
    async fn survivor(
        &self,
        endpoint: &str,
        cluster: Option<u64>,
    ) -> Result<Option<Survivor>, Error> {
        let status: StatusResponse = self
            .call(
                "status",
                endpoint,
                "/v3/maintenance/status",
                json!({}),
                Some(HEALTH_TIMEOUT),
            )
            .await?;
        // Served from the member's own store: no quorum needed.
        let list: ListResponse = self
            .call(
                "member list",
                endpoint,
                "/v3/cluster/member/list",
                json!({"linearizable": false}),
                Some(HEALTH_TIMEOUT),
            )
            .await?;
        let me = list.header.member_id;
        let Some(own) = list.members.iter().find(|m| m.id == me) else {
            return Ok(None);
        };
        if status.header.member_id != me || cluster.is_some_and(|c| c != list.header.cluster_id) {
            return Ok(None);
        }
        Ok(Some(Survivor {
            member: MemberId(me),
            name: own.name.clone(),
            is_learner: own.is_learner,
            endpoint: endpoint.to_string(),
            cluster_id: list.header.cluster_id,
            status: MemberStatus::from(&status),
            voters: list
                .members
                .into_iter()
                .filter(|m| !m.is_learner)
                .map(Member::from)
                .collect(),
        }))
    }

    /// The member list from the first endpoint that answers as a voter of `cluster` knowing a
    /// leader (the last one that did first), else what answers for itself (`survivor`).
    pub(super) async fn look(&self, endpoints: &[String], cluster: Option<u64>) -> ClusterState {
        let preferred = self.preferred.lock().unwrap().clone();
        let ordered = preferred
            .iter()
            .chain(endpoints.iter().filter(|e| Some(*e) != preferred.as_ref()));
        let mut failures = Vec::new();
        for endpoint in ordered {
            match self.view(endpoint, cluster).await {
                Ok(view) => {
                    *self.preferred.lock().unwrap() = Some(endpoint.clone());
                    return ClusterState::Known(Box::new(view));
                }
                Err(e) => failures.push(format!("{e:?}")),
            }
        }
        *self.preferred.lock().unwrap() = None;
        // Survivors matter only to a cluster that served (its record has an id): recovery, and
        // the holds of voters whose disks may have its newest writes. Before that, two calls
        // per endpoint on every observation of a bootstrap would buy nothing.
        let mut survivors = Vec::new();
        for endpoint in endpoints.iter().filter(|_| cluster.is_some()) {
            if let Ok(Some(s)) = self.survivor(endpoint, cluster).await {
                survivors.push(s);
            }
        }
        ClusterState::Unreachable {
            detail: if failures.is_empty() {
                "no endpoint to ask".into()
            } else {
                failures.join("; ")
            },
            survivors,
        }
    }
}

/// What the members that answered said of themselves, with the leader each knows.
struct Probed {
    statuses: std::collections::BTreeMap<MemberId, (MemberStatus, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn active_peers_are_read_from_etcds_metrics_page() {
        // As etcd 3.5 prints it (one sample per peer; Local is the member serving the page).
        let page = "# HELP etcd_network_active_peers The current number of active peer connections.\n\
            # TYPE etcd_network_active_peers gauge\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"91bc3c398fb3c146\"} 1\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"fd422379fda50e48\"} 0\n\
            etcd_network_disconnected_peers_total{Local=\"8e9e05c52164694d\",Remote=\"fd422379fda50e48\"} 3\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"not-hex\"} 1\n";
        let found: Vec<MemberId> = active_peers(page).collect();
        assert_eq!(found, [MemberId(0x91bc3c398fb3c146)]);
    }

    #[test]
    fn metrics_are_read_on_the_metrics_port_in_plain_http_then_on_the_client_url() {
        let m = EtcdMembers::new(Duration::from_secs(1), None).unwrap();
        let urls = |m: &EtcdMembers, u| -> Vec<String> {
            m.metrics_urls(u).iter().map(|u| u.to_string()).collect()
        };
        assert_eq!(
            urls(&m, "http://10.0.0.2:2379"),
            ["http://10.0.0.2:2379/metrics"]
        );
        let m = m.with_metrics_port(Some(2381));
        assert_eq!(
            urls(&m, "https://10.0.0.2:2379"),
            [
                "http://10.0.0.2:2381/metrics",
                "https://10.0.0.2:2379/metrics"
            ]
        );
    }
}
