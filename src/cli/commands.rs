//! The CLI's subcommands, against the real adapters: each observes through the same reconciler
//! the function runs, and prints what `cli`'s renderings make of it. `bin/etcd-asg.rs` only
//! parses arguments and calls one of these.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::adapters::Live;
use crate::dry_run;
use crate::error::Error;
use crate::event;
use crate::model::ClusterState;
use crate::ports::{Backups, Members, PublishedConfig};
use crate::reconciler::Response;

/// `status`: the table (or JSON), once or every `watch` seconds until interrupted.
pub async fn status(live: &Live, json: bool, watch: Option<u64>) -> Result<(), Error> {
    loop {
        let (obs, plan) = live.look().await?;
        let topology = &live.config.settings.topology;
        let rows = super::rows(&obs, |a| topology.peer_url(a));
        if json {
            println!("{}", super::status_json(&obs, &plan, &rows));
        } else {
            if watch.is_some() {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", super::status_text(&obs, &plan, &rows));
        }
        match watch {
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs.max(1))).await,
            None => return Ok(()),
        }
    }
}

/// `plan`: the step the function would take next, and why.
pub async fn plan(live: &Live, json: bool) -> Result<(), Error> {
    let (_, plan) = live.look().await?;
    if json {
        println!("{}", super::plan_json(&plan));
    } else {
        print!("{}", super::plan_text(&plan));
    }
    Ok(())
}

/// `backups`: the complete backups, oldest first, the current generation's marked.
pub async fn backups(live: &Live, json: bool) -> Result<(), Error> {
    let store = store(live)?;
    let all = store.list().await?.complete;
    let (obs, _) = live.look().await?;
    let token = obs.published.cluster.as_ref().map(|r| r.token.as_str());
    if json {
        println!("{}", super::backups_json(&all));
    } else {
        print!("{}", super::backups_text(&all, token));
    }
    Ok(())
}

/// `restore BACKUP`: the request RECOVERY=manual waits for, for a backup the bucket has (and
/// a new stack with START_FROM=backup starts from). `restore --from s3://…`: another stack's
/// backup copied into this stack's prefix first, with the caller's credentials; only into a
/// stack with no cluster record (checked again after the copy, before the request is written),
/// so no cluster of this stack, running or lost, is ever set up to be replaced by another's data.
pub async fn restore(
    live: &Live,
    backup: Option<String>,
    from: Option<String>,
) -> Result<(), Error> {
    let backup = match (backup, from) {
        (_, Some(source)) => {
            let has_record = |source: &str| {
                Error::Config {
                var: "--from".into(),
                value: source.to_string(),
                reason: "cannot be restored here: this stack has a cluster already (its record); start a side stack with StartFrom=backup from it".into(),
            }
            };
            if live.published.load().await?.cluster.is_some() {
                return Err(has_record(&source));
            }
            let copied = store(live)?.import(&source).await?;
            if live.published.load().await?.cluster.is_some() {
                // A launch started a cluster while the copy ran: the copy stays, unrequested.
                return Err(has_record(&source));
            }
            println!(
                "copied {source} into s3://{}/{} ({} bytes, checksum verified)",
                store(live)?.bucket,
                copied.key,
                copied.size
            );
            copied.key
        }
        (Some(backup), None) => backup,
        (None, None) => {
            return Err(Error::Config {
                var: "BACKUP".into(),
                value: String::new(),
                reason: "is missing: name a backup (or latest), or --from s3://…".into(),
            })
        }
    };
    let all = store(live)?.list().await?.complete;
    if backup != "latest" && !all.iter().any(|b| b.key == backup) {
        return Err(Error::Config {
            var: "BACKUP".into(),
            value: backup,
            reason: "is not a complete backup in the bucket (see `etcd-asg backups`)".into(),
        });
    }
    live.published.request_restore(&backup).await?;
    let (obs, plan) = live.look().await?;
    println!(
        "restore of {backup} requested ({}/restore-request).",
        live.config.parameter_prefix
    );
    if matches!(obs.cluster, ClusterState::Known(_)) {
        println!("The cluster answers: nothing is restored unless every member is lost.");
    } else if obs.published.cluster.is_none() {
        println!("No cluster yet: the first instance to launch starts it from this backup.");
        println!("next: {}", plan.step.why());
    } else {
        println!("next: {}", plan.step.why());
    }
    Ok(())
}

/// What `client-cert` was asked for.
pub struct ClientCert {
    pub user: String,
    pub days: i64,
    pub out: PathBuf,
    pub prefix: Option<String>,
    pub read_only: bool,
    pub password: bool,
}

/// `client-cert USER`: the user's access granted first (a certificate is handed out only for a
/// user that can use it), then the certificate, key (and password) written.
pub async fn client_cert(live: &Live, ask: ClientCert) -> Result<(), Error> {
    let Some(ca) = live.ca.get() else {
        return Err(Error::Config {
            var: "TLS".into(),
            value: "off".into(),
            reason: "is not 'managed': this cluster has no CA of ours to issue from".into(),
        });
    };
    if !(1..=3650).contains(&ask.days) {
        return Err(Error::Config {
            var: "--days".into(),
            value: ask.days.to_string(),
            reason: "must be 1 to 3650".into(),
        });
    }
    let (obs, _) = live.look().await?;
    // On if the function turns it on, or if it is on (whatever ETCD_AUTH says now).
    let auth = live.config.settings.etcd_auth
        || matches!(&obs.cluster, ClusterState::Known(v) if v.auth_enabled);
    let mut grant = super::prefix_grant(&ask.user, ask.prefix, ask.read_only, auth)?;
    if let Some(g) = grant.as_mut().filter(|_| ask.password) {
        g.password = Some(crate::pki::Password::generate()?);
    }
    if let Some(grant) = &grant {
        let ClusterState::Known(view) = &obs.cluster else {
            return Err(Error::Config {
                var: "--prefix".into(),
                value: grant.prefix.clone(),
                reason: "cannot be granted: the cluster does not answer".into(),
            });
        };
        live.members.grant_prefix(&view.endpoint, grant).await?;
    }
    let issued = ca.issue_client(&ask.user, ask.days * 86_400, (live.clock)(), !ask.password)?;
    let login = grant.as_ref().and_then(|g| g.password.as_ref());
    let written = super::write_client_files(&ask.out, &ask.user, &ca.cert_pem, &issued, login)?;
    print!(
        "{}",
        super::client_cert_text(&ask.user, &written, issued.not_after, &obs, grant.as_ref())
    );
    Ok(())
}

/// `replay FILE`: the real handler on an event, every write refused and listed.
pub async fn replay(live: Live, file: &Path) -> Result<(), Error> {
    let bytes = std::fs::read(file).map_err(|e| Error::Config {
        var: "FILE".into(),
        value: file.display().to_string(),
        reason: format!("cannot be read: {e}"),
    })?;
    let payload: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            println!(
                "rejected: event {} is not JSON: {e}",
                event::shown(&String::from_utf8_lossy(&bytes))
            );
            return Ok(());
        }
    };
    let (dry, refused) = dry_run::wrap(live);
    let response = dry
        .handle(&payload, Instant::now() + Duration::from_secs(60))
        .await?;
    match &response {
        Response::Reconciled { steps, waiting, .. } => {
            println!("decisions (dry run, nothing changed):");
            for s in steps {
                println!("  {s}");
            }
            if let Some(w) = waiting {
                println!("  then waiting: {w}");
            }
        }
        other => println!("{}", serde_json::to_string(other).unwrap_or_default()),
    }
    let refused = refused.lock().unwrap();
    if !refused.is_empty() {
        println!("writes refused:");
        for r in refused.iter() {
            println!("  {r}");
        }
    }
    Ok(())
}

fn store(live: &Live) -> Result<&crate::adapters::s3::S3Backups, Error> {
    live.backups.as_ref().ok_or_else(|| Error::Config {
        var: "BACKUP_BUCKET".into(),
        value: String::new(),
        reason: "is not set: backups are off for this cluster".into(),
    })
}
