//! What the operator CLI (`etcd-asg`) shows: the same observation and plan the function works
//! from, as tables for people and JSON for scripts. The renderings here are pure; `commands`
//! does the I/O.

pub mod commands;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde_json::{json, Value};

use crate::model::{ClusterState, ClusterView, Instance, Member, MemberId, Observation, Timestamp};
use crate::planner::{Plan, Step};
use crate::ports::PrefixGrant;

/// One row of `status`: an instance and its member, or a member no instance answers for.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize)]
pub struct Row {
    pub instance: String,
    pub lifecycle: String,
    /// Its Availability Zone (`-`: none known).
    pub zone: String,
    pub address: String,
    pub member: String,
    pub role: String,
    pub started: bool,
    pub healthy: bool,
    pub db_size: Option<u64>,
    pub db_in_use: Option<u64>,
    /// The release the member says it runs; `-` for an instance whose etcd does not answer.
    pub version: String,
    /// The release the instance declares (its `etcd-asg-etcd-version` tag).
    pub declared: String,
    pub config_published: bool,
}

fn member_of<'a>(view: &'a ClusterView, i: &Instance, peer_url: &str) -> Option<&'a Member> {
    view.members.iter().find(|m| {
        if m.is_started() {
            m.name == i.id
        } else {
            m.peer_urls.iter().any(|u| u == peer_url)
        }
    })
}

fn role(view: &ClusterView, m: &Member) -> &'static str {
    if m.is_learner {
        "learner"
    } else if view.leader == Some(m.id) {
        "leader"
    } else {
        "voter"
    }
}

/// A row with the member's columns filled in (or "-" without a member), the rest to the caller.
fn member_row(member: Option<(&ClusterView, &Member)>) -> Row {
    let Some((view, m)) = member else {
        return Row {
            instance: String::new(),
            lifecycle: "-".into(),
            zone: "-".into(),
            address: String::new(),
            member: "-".into(),
            role: "-".into(),
            started: false,
            healthy: false,
            db_size: None,
            db_in_use: None,
            version: String::new(),
            declared: String::new(),
            config_published: false,
        };
    };
    let status = view.statuses.get(&m.id);
    Row {
        member: m.id.to_string(),
        role: role(view, m).to_string(),
        started: m.is_started(),
        healthy: view.healthy.contains(&m.id),
        db_size: status.map(|s| s.db_size),
        db_in_use: status.map(|s| s.db_size_in_use),
        version: status.map(|s| s.version.clone()).unwrap_or_default(),
        ..member_row(None)
    }
}

/// Every instance of the group, then members whose instance is gone.
pub fn rows(obs: &Observation, peer_url: impl Fn(&str) -> String) -> Vec<Row> {
    let view = match &obs.cluster {
        ClusterState::Known(v) => Some(&**v),
        ClusterState::Unreachable { .. } => None,
    };
    let mut instances: Vec<&Instance> = obs.instances.iter().collect();
    instances.sort_by(|a, b| (a.launched_at, &a.id).cmp(&(b.launched_at, &b.id)));
    let mut seen = Vec::new();
    let mut out: Vec<Row> = instances
        .into_iter()
        .map(|i| {
            let address = i.address.clone().unwrap_or_default();
            let m = view.and_then(|v| member_of(v, i, &peer_url(&address)).map(|m| (v, m)));
            if let Some((_, m)) = m {
                seen.push(m.id);
            }
            let lifecycle = if i.healthy {
                i.state.to_string()
            } else {
                format!("{} (Unhealthy)", i.state)
            };
            Row {
                instance: i.id.clone(),
                lifecycle,
                zone: i.zone.clone().unwrap_or_else(|| "-".into()),
                address,
                config_published: obs.published.members.contains_key(&i.id),
                declared: i.etcd_version.map(|v| v.to_string()).unwrap_or_default(),
                ..member_row(m)
            }
        })
        .collect();
    if let Some(v) = view {
        for m in v.members.iter().filter(|m| !seen.contains(&m.id)) {
            out.push(Row {
                instance: if m.name.is_empty() {
                    "(none)".into()
                } else {
                    format!("{} (gone)", m.name)
                },
                address: m.peer_urls.join(","),
                ..member_row(Some((v, m)))
            });
        }
    }
    out
}

fn mib(b: Option<u64>) -> String {
    b.map_or("-".into(), |b| format!("{:.1}", b as f64 / 1048576.0))
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The `status` screen: the table, the cluster record, alarms, and what the function waits on.
pub fn status_text(obs: &Observation, plan: &Plan, rows: &[Row]) -> String {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED).set_header(vec![
        "instance",
        "lifecycle",
        "zone",
        "address",
        "member",
        "role",
        "started",
        "healthy",
        "db MiB / in use",
        "etcd / tag",
        "config",
    ]);
    for r in rows {
        table.add_row(vec![
            r.instance.clone(),
            r.lifecycle.clone(),
            r.zone.clone(),
            r.address.clone(),
            r.member.clone(),
            r.role.clone(),
            yes(r.started).into(),
            yes(r.healthy).into(),
            format!("{} / {}", mib(r.db_size), mib(r.db_in_use)),
            format!(
                "{} / {}",
                if r.version.is_empty() {
                    "-"
                } else {
                    &r.version
                },
                if r.declared.is_empty() {
                    "-"
                } else {
                    &r.declared
                }
            ),
            (if r.config_published { "published" } else { "-" }).into(),
        ]);
    }
    let mut out = format!("{table}\n{}{}", state_lines(obs), zone_line(obs));
    out += &format!("next: {}\n", plan.step.why());
    for w in plan
        .waits
        .iter()
        .filter(|w| Step::Wait((*w).clone()) != plan.step)
    {
        out += &format!("also waiting: {}\n", w.why());
    }
    out
}

/// The voters by zone and what one zone's loss would leave.
fn zone_line(obs: &Observation) -> String {
    let Some(loss) = crate::planner::zones::worst_zone_loss(obs) else {
        return format!("zones: {}\n", obs.zones.join(", "));
    };
    let by_zone: Vec<String> = loss
        .voters
        .iter()
        .map(|(z, n)| format!("{z} {n}"))
        .collect();
    let verdict = match crate::planner::zones::zone_risk(obs) {
        Some(risk) => format!("AT RISK: {risk}"),
        None => format!(
            "losing {} leaves {} of a quorum of {}",
            loss.zone, loss.left, loss.quorum
        ),
    };
    format!(
        "zones: answering voters {}; {verdict}\n",
        by_zone.join(", ")
    )
}

/// The cluster record, the alarms or who still answers: the lines under `status`'s table.
fn state_lines(obs: &Observation) -> String {
    let mut out = String::new();
    match &obs.published.cluster {
        Some(r) => {
            out += &format!(
                "cluster record: token {}, seed {}, {}{}\n",
                r.token,
                r.seed,
                if r.has_served() {
                    "served"
                } else {
                    "bootstrapping"
                },
                r.cluster_id
                    .map(|id| format!(", cluster id {id:x}"))
                    .unwrap_or_default()
            );
        }
        None => out += "cluster record: none (no cluster bootstrapped yet)\n",
    }
    if let Some(line) = adoption_line(obs) {
        out += &line;
    }
    if let ClusterState::Known(v) = &obs.cluster {
        out += &format!(
            "cluster version: {}\n",
            v.cluster_version
                .map_or("unknown".into(), |c| c.minor_str())
        );
    }
    match &obs.cluster {
        ClusterState::Known(v) if v.alarms.is_empty() => out += "alarms: none\n",
        ClusterState::Known(v) => {
            let a: Vec<String> = v
                .alarms
                .iter()
                .map(|a| format!("{} on {}", a.kind, a.member))
                .collect();
            out += &format!("alarms: {}\n", a.join(", "));
        }
        ClusterState::Unreachable { detail, survivors } => {
            out += &format!("etcd: no member answered as a voter that knows a leader ({detail})\n");
            for s in survivors {
                out += &format!(
                    "survivor: member {} at {} answers alone, revision {}\n",
                    s.member, s.endpoint, s.status.revision
                );
            }
        }
    }
    out
}

/// The old members an adoption still has to see leave (those the cluster still lists, when it
/// answers; else all it began with), and how many it began with.
fn adoption_left(obs: &Observation) -> Option<(Vec<MemberId>, usize)> {
    let adopting = obs.published.cluster.as_ref()?.adopting.as_ref()?;
    let left = adopting
        .members
        .iter()
        .map(|&id| MemberId(id))
        .filter(|id| match &obs.cluster {
            ClusterState::Known(v) => v.member(*id).is_some(),
            ClusterState::Unreachable { .. } => true,
        })
        .collect();
    Some((left, adopting.members.len()))
}

/// Where an adoption stands (docs/adopting.md): the old members left of those it began with.
fn adoption_line(obs: &Observation) -> Option<String> {
    let (left, began) = adoption_left(obs)?;
    let ids: Vec<String> = left.iter().map(ToString::to_string).collect();
    Some(format!(
        "adoption: under way, {} of the {began} old members left ({})\n",
        left.len(),
        if ids.is_empty() {
            "none: the record says so next".into()
        } else {
            ids.join(", ")
        }
    ))
}

pub fn status_json(obs: &Observation, plan: &Plan, rows: &[Row]) -> Value {
    let (alarms, reachable) = match &obs.cluster {
        ClusterState::Known(v) => (
            v.alarms
                .iter()
                .map(|a| json!({"member": a.member.to_string(), "alarm": a.kind}))
                .collect(),
            true,
        ),
        ClusterState::Unreachable { .. } => (vec![], false),
    };
    json!({
        "rows": rows,
        "cluster_record": obs.published.cluster.as_ref().map(|r| json!({
            "token": r.token, "seed": r.seed, "created_at": r.created_at,
            "served": r.has_served(), "cluster_id": r.cluster_id.map(|id| format!("{id:x}")),
        })),
        "adoption": adoption_left(obs).map(|(left, began)| json!({
            "old_members_left": left.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "old_members_at_start": began,
        })),
        "reachable": reachable,
        "cluster_version": match &obs.cluster {
            ClusterState::Known(v) => v.cluster_version.map(|c| c.to_string()),
            ClusterState::Unreachable { .. } => None,
        },
        "alarms": alarms,
        "plan": plan_json(plan),
    })
}

pub fn plan_json(plan: &Plan) -> Value {
    json!({
        "step": plan.step.name(),
        "instance": plan.step.instance(),
        "member": plan.step.member().map(|m| m.to_string()),
        "why": plan.step.why(),
        "waits": plan.waits.iter().map(|w| json!({
            "wait": w.name(),
            "instance": w.instance(),
            "member": w.member().map(|m| m.to_string()),
            "why": w.why(),
        })).collect::<Vec<_>>(),
    })
}

pub fn plan_text(plan: &Plan) -> String {
    let mut out = format!("next step: {}\n  why: {}\n", plan.step, plan.step.why());
    for w in &plan.waits {
        out += &format!("waiting: {w}\n  why: {}\n", w.why());
    }
    out
}

/// `backups`: one row per complete backup, newest last, the current generation's marked.
pub fn backups_text(backups: &[crate::model::Backup], current_token: Option<&str>) -> String {
    if backups.is_empty() {
        return "no backups yet\n".into();
    }
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED).set_header(vec![
        "key",
        "taken (UTC)",
        "revision",
        "MiB",
        "generation",
    ]);
    for b in backups {
        let generation = if Some(b.token.as_str()) == current_token {
            format!("{} (current)", b.token)
        } else {
            b.token.clone()
        };
        table.add_row(vec![
            b.key.clone(),
            crate::adapters::s3::stamp(b.taken_at),
            b.revision.to_string(),
            mib(Some(b.size)),
            generation,
        ]);
    }
    format!("{table}\n")
}

pub fn backups_json(backups: &[crate::model::Backup]) -> Value {
    json!(backups
        .iter()
        .map(
            |b| json!({"key": b.key, "token": b.token, "taken_at": b.taken_at,
            "revision": b.revision, "size": b.size})
        )
        .collect::<Vec<_>>())
}

/// Writes `ca.crt`, `USER.crt` and `USER.key` (0600, created new: an existing file is never
/// overwritten) into `dir`; returns their paths in that order.
pub fn write_client_files(
    dir: &std::path::Path,
    user: &str,
    ca_pem: &str,
    issued: &crate::pki::Issued,
    password: Option<&crate::pki::Password>,
) -> Result<Vec<std::path::PathBuf>, crate::Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |path: &std::path::Path, e: std::io::Error| crate::Error::Config {
        var: "--out".into(),
        value: path.display().to_string(),
        reason: format!("cannot be written: {e}"),
    };
    std::fs::create_dir_all(dir).map_err(|e| failed(dir, e))?;
    let mut paths = vec![
        dir.join("ca.crt"),
        dir.join(format!("{user}.crt")),
        dir.join(format!("{user}.key")),
    ];
    let mut texts = vec![ca_pem, issued.cert_pem.as_str(), issued.key_pem.expose()];
    if let Some(p) = password {
        paths.push(dir.join(format!("{user}.password")));
        texts.push(p.expose());
    }
    for (path, text) in paths.iter().zip(texts) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| failed(path, e))?;
        f.write_all(text.as_bytes()).map_err(|e| failed(path, e))?;
    }
    Ok(paths)
}

/// What `client-cert --prefix P [--read-only]` asks of etcd, checked: refused with a reason
/// naming the bad value (`--read-only` without `--prefix` is refused by the argument parser).
pub fn prefix_grant(
    user: &str,
    prefix: Option<String>,
    read_only: bool,
    auth: bool,
) -> Result<Option<PrefixGrant>, crate::Error> {
    let bad = |value: &str, reason: &str| crate::Error::Config {
        var: "--prefix".into(),
        value: value.into(),
        reason: reason.into(),
    };
    match prefix {
        None if auth && user != crate::pki::ROOT_USER => Err(bad(
            "",
            "is needed: etcd's authentication is on (ETCD_AUTH), and a certificate naming a \
             user with no role reaches no key",
        )),
        None => Ok(None),
        Some(_) if user == crate::pki::ROOT_USER => {
            Err(bad("", "cannot be given to root, which reaches everything"))
        }
        Some(p) if p.is_empty() || p.chars().any(char::is_control) => Err(bad(
            &p,
            "must be a non-empty key prefix without control characters (such as /app/)",
        )),
        Some(prefix) => Ok(Some(PrefixGrant {
            user: user.to_string(),
            prefix,
            read_only,
            password: None,
        })),
    }
}

/// What `client-cert` prints: the files, what the user may reach, and an etcdctl line that uses
/// them.
pub fn client_cert_text(
    user: &str,
    files: &[std::path::PathBuf],
    not_after: Timestamp,
    obs: &Observation,
    grant: Option<&PrefixGrant>,
) -> String {
    let endpoints: Vec<String> = match &obs.cluster {
        ClusterState::Known(v) => v
            .voters()
            .filter_map(|m| m.client_urls.first().cloned())
            .collect(),
        ClusterState::Unreachable { .. } => vec![],
    };
    let endpoints = if endpoints.is_empty() {
        "https://<load balancer name>:2379".to_string()
    } else {
        endpoints.join(",")
    };
    let (access, command) = match grant {
        Some(g) => (
            format!(
                "etcd user {user} may {} keys starting with {:?}, and nothing else\n",
                if g.read_only {
                    "read"
                } else {
                    "read and write"
                },
                g.prefix
            ),
            format!("get {:?} --prefix", g.prefix),
        ),
        None => (String::new(), "endpoint health".to_string()),
    };
    if let Some(password) = files.get(3) {
        // A gateway user: a login, then its token on every call.
        let first = endpoints.split(',').next().unwrap_or_default();
        let tls = format!(
            "--cacert {} --cert {} --key {}",
            files[0].display(),
            files[1].display(),
            files[2].display()
        );
        let password = password.display();
        return format!(
            r#"gateway user {user}: certificate (valid until {not_after}, epoch seconds) and password:
  {}
  {}
  {}
  {password} (private: hand the key and the password over as secrets)
{access}
# log in (the answer's "token"), then send the token as the Authorization header:
curl -s {tls} {first}/v3/auth/authenticate \
  -d "{{\"name\":\"{user}\",\"password\":\"$(cat {password})\"}}"
curl -s {tls} -H "Authorization: <token>" {first}/v3/kv/range -d '{{"key":"<base64 key>"}}'
"#,
            files[0].display(),
            files[1].display(),
            files[2].display(),
        );
    }
    format!(
        "client certificate for etcd user {user} (valid until {not_after}, epoch seconds):\n  \
         {}\n  {}\n  {} (private: hand it over as a secret)\n{access}\n\
         etcdctl --endpoints {endpoints} --cacert {} --cert {} --key {} {command}\n",
        files[0].display(),
        files[1].display(),
        files[2].display(),
        files[0].display(),
        files[1].display(),
        files[2].display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LifecycleState, MemberId, MemberStatus};

    #[test]
    fn a_prefix_grant_is_checked_and_its_range_ends_after_the_prefix() {
        let g = prefix_grant("app", Some("/app/".into()), true, true)
            .unwrap()
            .unwrap();
        assert!(g.read_only);
        assert_eq!(g.range_end(), b"/app0".to_vec());
        let top = PrefixGrant {
            prefix: "a\u{7f}".into(),
            ..g.clone()
        };
        assert_eq!(top.range_end(), b"a\x80".to_vec());
        assert!(prefix_grant("app", None, false, false).unwrap().is_none());
        assert!(prefix_grant("root", None, false, true).unwrap().is_none());
        for (user, prefix, auth, needle) in [
            ("app", None, true, "is needed"),
            ("root", Some("/x/"), true, "root"),
            ("app", Some(""), true, "non-empty"),
            ("app", Some("/a\n"), false, "control"),
        ] {
            let e = prefix_grant(user, prefix.map(String::from), false, auth)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--prefix") && e.contains(needle), "{e}");
        }
    }

    /// Long: one observation built in full, rendered as the table and as JSON, then again with
    /// an adoption under way in its record.
    #[test]
    fn rows_join_instances_to_members_and_list_members_without_one() {
        let voter = |n: u64, name: &str| Member {
            id: MemberId(n),
            name: name.into(),
            peer_urls: vec![format!("http://10.0.0.{n}:2380")],
            client_urls: vec![],
            is_learner: false,
        };
        let obs = Observation {
            desired_capacity: 3,
            instances: vec![Instance {
                id: "i-1".into(),
                arn: "arn:aws:ec2:us-east-1:123456789012:instance/i-1".into(),
                state: LifecycleState::InService,
                address: Some("10.0.0.1".into()),
                launched_at: 1,
                healthy: true,
                zone: None,
                etcd_version: None,
            }],
            cluster: ClusterState::Known(Box::new(ClusterView {
                cluster_id: 1,
                members: vec![voter(1, "i-1"), voter(2, "i-2")],
                leader: Some(MemberId(1)),
                healthy: [MemberId(1)].into(),
                endpoint: String::new(),
                statuses: [(
                    MemberId(1),
                    MemberStatus {
                        db_size: 2 << 20,
                        db_size_in_use: 1 << 20,
                        version: "3.5.1".into(),
                        revision: 9,
                    },
                )]
                .into(),
                alarms: vec![],
                history_compacted: false,
                auth_enabled: false,
                root_refused: None,
                token_kinds: vec![],
                cluster_version: None,
                peer_connected: Default::default(),
                defragmented: Default::default(),
            })),
            now: 10,
            ..Observation::for_tests()
        };
        let rows = rows(&obs, |a| format!("http://{a}:2380"));
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].role.as_str(), rows[0].healthy), ("leader", true));
        assert_eq!(rows[0].db_size, Some(2 << 20));
        assert_eq!(rows[1].instance, "i-2 (gone)");
        assert!(!rows[1].healthy);
        let plan = Plan {
            step: Step::Idle,
            waits: vec![],
        };
        let text = status_text(&obs, &plan, &rows);
        assert!(
            text.contains("leader") && text.contains("2.0 / 1.0"),
            "{text}"
        );
        assert!(text.contains("cluster record: none"), "{text}");
        assert!(!text.contains("adoption:"), "{text}");
        let j = status_json(&obs, &plan, &rows);
        assert_eq!(j["rows"][0]["member"], "1");
        assert_eq!(j["plan"]["step"], "idle");
        assert!(j["adoption"].is_null());
        // An adoption under way: of old members 2 and 7, member 2 is still listed.
        let mut adopting = obs;
        adopting.published.cluster = Some(crate::model::ClusterRecord {
            adopting: Some(crate::model::Adopting {
                members: vec![2, 7],
                since: 1,
            }),
            ..crate::model::ClusterRecord::bootstrapping("c-adopted-1".into(), "old-1".into(), 1)
        });
        let text = status_text(&adopting, &plan, &rows);
        assert!(
            text.contains("adoption: under way, 1 of the 2 old members left (2)"),
            "{text}"
        );
        let j = status_json(&adopting, &plan, &rows);
        assert_eq!(j["adoption"]["old_members_left"], json!(["2"]));
    }
}
