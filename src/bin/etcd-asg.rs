//! `etcd-asg`: the operator's view of what the function sees and would do. Wiring only: the
//! observation, the planner and the rendering are the library's (`etcd_asg_lifecycle::cli`).

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use etcd_asg_lifecycle::adapters::{self, autoscaling::settings_of_stack};
use etcd_asg_lifecycle::model::ClusterState;
use etcd_asg_lifecycle::ports::{Backups, Members, PublishedConfig};
use etcd_asg_lifecycle::{cli, dry_run, event, Config, Error, Response};

/// Show and explain what etcd-asg-lifecycle sees, and what it would do next.
///
/// Settings come from a deployed stack (`--stack`, read from its Auto Scaling group's tags) or
/// from the same environment variables as the function (ASG_NAME, LAUNCH_HOOK_NAME, …). AWS
/// credentials and region: the standard chain (AWS_PROFILE, AWS_REGION, …).
#[derive(Parser)]
#[command(name = "etcd-asg", version)]
struct Args {
    /// The CloudFormation stack that deployed the cluster.
    #[arg(long, global = true)]
    stack: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Instances, members, health, database sizes, the cluster record, alarms and what the
    /// function is waiting on.
    Status {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Refresh every SECONDS until interrupted.
        #[arg(long, value_name = "SECONDS")]
        watch: Option<u64>,
    },
    /// The step the function would take next, and why; changes nothing.
    Plan {
        #[arg(long)]
        json: bool,
    },
    /// The complete backups in the bucket, oldest first.
    Backups {
        #[arg(long)]
        json: bool,
    },
    /// Ask for BACKUP (a key from `backups`, or `latest`) to be restored once every member is
    /// gone: what RECOVERY=manual waits for.
    Restore { backup: String },
    /// Issue a client certificate for USER from the cluster's CA (TLS=managed) and write
    /// ca.crt, USER.crt and USER.key (0600) into --out; prints how to use them. With --password,
    /// a user of etcd's JSON gateway: a password too (USER.password, 0600) and a certificate
    /// without a common name.
    ClientCert {
        /// The etcd user the certificate names (its common name).
        user: String,
        /// Validity in days.
        #[arg(long, default_value_t = 90)]
        days: i64,
        /// The folder to write the files to (created if missing; existing files are kept).
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
        /// The keys USER may reach: those starting with PREFIX (an etcd role of USER's name
        /// holding that range, granted to USER). Needed once etcd's authentication is on.
        #[arg(long)]
        prefix: Option<String>,
        /// Read only: no writes under --prefix.
        #[arg(long, requires = "prefix")]
        read_only: bool,
        /// For the JSON gateway (curl, HTTP clients): USER logs in with a fresh password
        /// (written to USER.password, never printed), and the certificate has no common name,
        /// which the gateway refuses once authentication is on. Issuing again sets a new one.
        #[arg(long, requires = "prefix")]
        password: bool,
    },
    /// Run the real handler on an event file against the real account with every write refused,
    /// printing the decisions it would make.
    Replay {
        /// An EventBridge event (JSON), such as the files in events/.
        file: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-asg: {e:?}");
            if let Error::Config { .. } = e {
                eprintln!("(give --stack NAME, or the function's variables: see the README's Configuration)");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let aws = aws_config::load_from_env().await;
    let config = match &args.stack {
        Some(stack) => {
            let tags = settings_of_stack(&aws_sdk_autoscaling::Client::new(&aws), stack).await?;
            // The stack's tags, then the environment (for TLS files and timeouts).
            from_tags(tags)?
        }
        None => Config::from_env()?,
    };
    let live = adapters::connect(config, &aws).await?;
    match args.command {
        Command::Status { json, watch } => loop {
            let (obs, plan) = live.look().await?;
            let topology = &live.config.settings.topology;
            let rows = cli::rows(&obs, |a| topology.peer_url(a));
            if json {
                println!("{}", cli::status_json(&obs, &plan, &rows));
            } else {
                if watch.is_some() {
                    print!("\x1b[2J\x1b[H");
                }
                print!("{}", cli::status_text(&obs, &plan, &rows));
            }
            match watch {
                Some(secs) => tokio::time::sleep(Duration::from_secs(secs.max(1))).await,
                None => return Ok(()),
            }
        },
        Command::Plan { json } => {
            let (_, plan) = live.look().await?;
            if json {
                println!("{}", cli::plan_json(&plan));
            } else {
                print!("{}", cli::plan_text(&plan));
            }
            Ok(())
        }
        Command::Backups { json } => {
            let Some(store) = &live.backups else {
                return Err(backups_off());
            };
            let all = store.list().await?;
            let (obs, _) = live.look().await?;
            let token = obs.published.cluster.as_ref().map(|r| r.token.as_str());
            if json {
                println!("{}", cli::backups_json(&all));
            } else {
                print!("{}", cli::backups_text(&all, token));
            }
            Ok(())
        }
        Command::Restore { backup } => {
            let Some(store) = &live.backups else {
                return Err(backups_off());
            };
            let all = store.list().await?;
            if backup != "latest" && !all.iter().any(|b| b.key == backup) {
                return Err(Error::Config {
                    var: "BACKUP".into(),
                    value: backup,
                    reason: "is not a complete backup in the bucket (see `etcd-asg backups`)"
                        .into(),
                });
            }
            live.published.request_restore(&backup).await?;
            let (obs, plan) = live.look().await?;
            println!(
                "restore of {backup} requested ({}/restore-request).",
                live.config.parameter_prefix
            );
            let reachable = matches!(obs.cluster, ClusterState::Known(_));
            if reachable {
                println!("The cluster answers: nothing is restored unless every member is lost.");
            } else {
                println!("next: {}", cli::explain_step(&plan.step));
            }
            Ok(())
        }
        Command::ClientCert {
            user,
            days,
            out,
            prefix,
            read_only,
            password,
        } => {
            let Some(ca) = &live.ca else {
                return Err(Error::Config {
                    var: "TLS".into(),
                    value: "off".into(),
                    reason: "is not 'managed': this cluster has no CA of ours to issue from".into(),
                });
            };
            if !(1..=3650).contains(&days) {
                return Err(Error::Config {
                    var: "--days".into(),
                    value: days.to_string(),
                    reason: "must be 1 to 3650".into(),
                });
            }
            let (obs, _) = live.look().await?;
            // On if the function turns it on, or if it is on (whatever ETCD_AUTH says now).
            let auth = live.config.settings.etcd_auth
                || matches!(&obs.cluster, ClusterState::Known(v) if v.auth_enabled);
            let mut grant = cli::prefix_grant(&user, prefix, read_only, auth)?;
            if let Some(g) = grant.as_mut().filter(|_| password) {
                g.password = Some(etcd_asg_lifecycle::pki::Password::generate()?);
            }
            // The user's access first: a certificate is handed out only for a user that can use it.
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
            let issued = ca.issue_client(&user, days * 86_400, (live.clock)(), !password)?;
            let login = grant.as_ref().and_then(|g| g.password.as_ref());
            let written = cli::write_client_files(&out, &user, &ca.cert_pem, &issued, login)?;
            print!(
                "{}",
                cli::client_cert_text(&user, &written, issued.not_after, &obs, grant.as_ref())
            );
            Ok(())
        }
        Command::Replay { file } => {
            let bytes = std::fs::read(&file).map_err(|e| Error::Config {
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
    }
}

fn backups_off() -> Error {
    Error::Config {
        var: "BACKUP_BUCKET".into(),
        value: String::new(),
        reason: "is not set: backups are off for this cluster".into(),
    }
}

fn from_tags(tags: HashMap<String, String>) -> Result<Config, Error> {
    Config::from_lookup(|k| tags.get(k).cloned().or_else(|| std::env::var(k).ok()))
}
