//! The CLI's subcommands, against the real adapters: each observes through the same reconciler
//! the function runs, and prints what `cli`'s renderings make of it. `bin/etcd-asg.rs` only
//! parses arguments and calls one of these.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::dry_run;
use crate::error::Error;
use crate::event;
use crate::live::Live;
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
            // START_FROM=empty: the first launch creates an empty cluster and never reads a
            // request (`planner::recovery::first_generation`), so the copy would promise a start
            // the stack ignores.
            if !live.config.settings.start_from_backup {
                return Err(Error::Config {
                    var: "--from".into(),
                    value: source,
                    reason: "is not used by this stack: it has START_FROM=empty, and its first launch starts an empty cluster; deploy it with StartFrom=backup to start from another stack's backup".into(),
                });
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

/// `adopt-secrets`: what adopting a cluster with TLS or authentication needs (docs/adopting.md),
/// stored as this stack's SecureStrings (its KMS key): the cluster's CA, imported as the stack's
/// own (create-only: refused where the stack has another CA already), and its `root` password
/// (over any stored before). The files' contents never reach the output or an error.
pub async fn adopt_secrets(
    live: &Live,
    ca: Option<(PathBuf, PathBuf)>,
    password_file: Option<PathBuf>,
) -> Result<(), Error> {
    use crate::ports::{Created, Secrets};
    if ca.is_none() && password_file.is_none() {
        return Err(Error::Config {
            var: "--ca-cert".into(),
            value: String::new(),
            reason: "is missing: give --ca-cert and --ca-key, --root-password-file, or both".into(),
        });
    }
    // Both read and checked before anything is stored.
    let password = match &password_file {
        Some(file) => Some(read_password(file)?),
        None => None,
    };
    let imported = match &ca {
        Some((cert, key)) => {
            let cert_pem = read_text("--ca-cert", cert)?;
            let key_pem = crate::pki::KeyPem::from(read_text("--ca-key", key)?);
            Some(crate::pki::Ca::import(&cert_pem, key_pem, (live.clock)())?)
        }
        None => None,
    };
    if let (Some(ca), Some((cert, _))) = (&imported, &ca) {
        let name = format!("{}/pki/ca", live.config.parameter_prefix);
        match live.published.create_ca(ca).await? {
            Created::Created => println!(
                "imported the CA {:?} as this stack's ({name})",
                ca.common_name
            ),
            Created::AlreadyExists => match live.published.load_ca().await? {
                Some(kept) if kept.cert_pem == ca.cert_pem => {
                    println!(
                        "the CA {:?} is this stack's already ({name})",
                        ca.common_name
                    )
                }
                kept => {
                    return Err(Error::Config {
                        var: "--ca-cert".into(),
                        value: cert.display().to_string(),
                        reason: format!(
                            "cannot be imported: this stack has another CA already ({:?}, {name}); \
                             the function made its own before this one was imported? Only a stack \
                             with no cluster yet may start again: docs/adopting.md",
                            kept.map(|k| k.common_name).unwrap_or_default()
                        ),
                    });
                }
            },
        }
    }
    if let Some(password) = &password {
        live.published.put_root_password(password).await?;
        println!(
            "stored root's password ({}/pki/adopted-root-password)",
            live.config.parameter_prefix
        );
    }
    live.identify().await?;
    let (_, plan) = live.look().await?;
    println!("next: {}", plan.step.why());
    Ok(())
}

fn read_text(var: &str, file: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(file).map_err(|e| Error::Config {
        var: var.into(),
        value: file.display().to_string(),
        reason: format!("cannot be read: {e}"),
    })?;
    String::from_utf8(bytes).map_err(|_| Error::Config {
        var: var.into(),
        value: file.display().to_string(),
        reason: "is not text (PEM)".into(),
    })
}

/// A password file: its first line, which must not be empty.
fn read_password(file: &Path) -> Result<crate::pki::Password, Error> {
    let text = read_text("--root-password-file", file)?;
    let line = text.lines().next().unwrap_or_default();
    if line.is_empty() {
        return Err(Error::Config {
            var: "--root-password-file".into(),
            value: file.display().to_string(),
            reason: "holds no password on its first line".into(),
        });
    }
    Ok(crate::pki::Password::given(line.to_string()))
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
