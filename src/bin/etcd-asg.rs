//! `etcd-asg`: the operator's view of what the function sees and would do. Wiring only: the
//! observation, the planner, the commands and the rendering are the library's
//! (`etcd_asg_lifecycle::cli`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use etcd_asg_lifecycle::adapters::{self, autoscaling::settings_of_stack};
use etcd_asg_lifecycle::cli::commands;
use etcd_asg_lifecycle::live;
use etcd_asg_lifecycle::{Config, Error};

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
    /// gone: what RECOVERY=manual waits for, and what a new stack starts from. With --from, a
    /// backup of another stack (another prefix or bucket) is copied into this stack's prefix
    /// first, with your credentials, its checksum verified on the way.
    Restore {
        #[arg(required_unless_present = "from", conflicts_with = "from")]
        backup: Option<String>,
        /// Another stack's backup, `s3://BUCKET/etcd-asg-lifecycle/STACK/GENERATION/FILE.db`
        /// (a key from that stack's `etcd-asg backups`).
        #[arg(long, value_name = "S3_URL")]
        from: Option<String>,
    },
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
    /// A cluster to adopt (ADOPT_ENDPOINTS) with TLS or authentication: store its CA as this
    /// stack's (certificate and key, PEM; the key PKCS#8), so that the members the stack adds
    /// present certificates its members trust, and its root user's password, so that the
    /// function can act as root there. SecureStrings under the stack's prefix, which only the
    /// function reads; nothing is printed of them. Before the function's first invocation for
    /// the CA: see docs/adopting.md.
    AdoptSecrets {
        #[arg(long, requires = "ca_key", value_name = "FILE")]
        ca_cert: Option<std::path::PathBuf>,
        #[arg(long, requires = "ca_cert", value_name = "FILE")]
        ca_key: Option<std::path::PathBuf>,
        /// A file whose first line is root's password.
        #[arg(long, value_name = "FILE")]
        root_password_file: Option<std::path::PathBuf>,
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
    let aws = adapters::aws_config(adapters::CLI_APP).await;
    let config = match &args.stack {
        // The stack's tags, then the environment (for TLS files and timeouts).
        Some(stack) => {
            let tags = settings_of_stack(&aws_sdk_autoscaling::Client::new(&aws), stack).await?;
            Config::from_lookup(|k| tags.get(k).cloned().or_else(|| std::env::var(k).ok()))?
        }
        None => Config::from_env()?,
    };
    let live = live::connect(config, &aws)?;
    if let Command::AdoptSecrets {
        ca_cert,
        ca_key,
        root_password_file,
    } = args.command
    {
        // Before `identify`, which would make the stack a CA of its own where it has none.
        let ca = ca_cert.zip(ca_key);
        let stored = commands::adopt_secrets(&live, ca, root_password_file).await;
        return stored;
    }
    live.identify().await?;
    match args.command {
        Command::Status { json, watch } => commands::status(&live, json, watch).await,
        Command::Plan { json } => commands::plan(&live, json).await,
        Command::Backups { json } => commands::backups(&live, json).await,
        Command::Restore { backup, from } => commands::restore(&live, backup, from).await,
        Command::ClientCert {
            user,
            days,
            out,
            prefix,
            read_only,
            password,
        } => {
            let ask = commands::ClientCert {
                user,
                days,
                out,
                prefix,
                read_only,
                password,
            };
            commands::client_cert(&live, ask).await
        }
        Command::Replay { file } => commands::replay(live, &file).await,
        Command::AdoptSecrets { .. } => unreachable!("handled before identify"),
    }
}
