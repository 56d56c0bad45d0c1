//! Every variable the function and the CLI read, each with its default and meaning written once,
//! here. The docs' table (docs/configuration.md) is this list, checked by a test.

/// One environment variable.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Var {
    pub name: &'static str,
    /// The value taken when the variable is unset or empty; "" when there is none.
    pub default: &'static str,
    /// Said of the default in the docs: beside the value ("(2 GiB)"), or instead of it
    /// ("required", "`ASG_NAME`", "unset (backups off)").
    pub note: &'static str,
    pub doc: &'static str,
}

impl Var {
    const fn new(name: &'static str, default: &'static str, doc: &'static str) -> Self {
        Self {
            name,
            default,
            note: "",
            doc,
        }
    }

    const fn noted(self, note: &'static str) -> Self {
        Self { note, ..self }
    }

    /// The default as the docs' table shows it.
    pub fn shown_default(&self) -> String {
        match (self.default, self.note) {
            ("", note) => note.to_string(),
            (value, "") => format!("`{value}`"),
            (value, note) => format!("`{value}` {note}"),
        }
    }
}

// The group and where its cluster's state lives.
pub const ASG_NAME: Var = Var::new(
    "ASG_NAME",
    "",
    "the group whose membership this function keeps",
)
.noted("required");
pub const LAUNCH_HOOK_NAME: Var =
    Var::new("LAUNCH_HOOK_NAME", "", "its launch lifecycle hook").noted("required");
pub const TERMINATE_HOOK_NAME: Var =
    Var::new("TERMINATE_HOOK_NAME", "", "its terminate lifecycle hook").noted("required");
pub const CLUSTER_NAME: Var =
    Var::new("CLUSTER_NAME", "", "names the cluster token").noted("`ASG_NAME`");
pub const PARAMETER_PREFIX: Var = Var::new(
    "PARAMETER_PREFIX",
    "",
    "where the record and configs live (SSM Parameter Store)",
)
.noted("`/etcd-asg-lifecycle/<CLUSTER_NAME>`");

// Topology: how members reach each other and clients reach them, what they store.
pub const ADDRESS_SOURCE: Var = Var::new(
    "ADDRESS_SOURCE",
    "private-ip",
    "an instance's etcd address: `private-ip` or `tag:<key>` (multi-ENI setups; the \
     simulation's loopback addresses). A value that is not an IP address or host name is \
     refused with a warning, and the instance is neither seeded nor joined. An address is read \
     once per instance and Lambda environment: a tag changed later is not seen",
);
pub const ETCD_PEER_SCHEME: Var = Var::new("ETCD_PEER_SCHEME", "http", "peer URLs' scheme");
pub const ETCD_PEER_PORT: Var = Var::new("ETCD_PEER_PORT", "2380", "peer URLs' port");
pub const ETCD_CLIENT_SCHEME: Var = Var::new(
    "ETCD_CLIENT_SCHEME",
    "http",
    "client URLs' scheme (the function calls them)",
);
pub const ETCD_CLIENT_PORT: Var = Var::new("ETCD_CLIENT_PORT", "2379", "client URLs' port");
pub const AUTO_COMPACTION_RETENTION: Var = Var::new(
    "AUTO_COMPACTION_RETENTION",
    "1h",
    "every member's periodic auto-compaction retention (`ETCD_AUTO_COMPACTION_MODE=periodic`); \
     a duration from `1m` to a year, or whole hours",
);
pub const QUOTA_BACKEND_BYTES: Var = Var::new(
    "QUOTA_BACKEND_BYTES",
    "2147483648",
    "every member's backend quota; at most 8 GiB (etcd's advice)",
)
.noted("(2 GiB)");

pub const SNAPSHOT_COUNT: Var = Var::new(
    "SNAPSHOT_COUNT",
    "10000",
    "every member's `--snapshot-count`: applied entries between raft snapshots, after each of \
     which a member keeps only the last 5000 entries of its log. 10000 is etcd 3.6's default \
     (3.5's was 100000): a log compacted this often also sheds a 3.4-born cluster's v2 entries, \
     which etcd 3.6 cannot replay ([etcd versions](deploy.md#etcd-versions)); 100 to 1000000",
);

// TLS, certificates and authentication.
pub const TLS: Var = Var::new(
    "TLS",
    "off",
    "`managed`: the function keeps the cluster's CA and issues every certificate \
     ([TLS](tls.md)); client and peer URLs are then `https`",
);
pub const MEMBER_CERT_DAYS: Var = Var::new(
    "MEMBER_CERT_DAYS",
    "90",
    "validity of a member's certificate (`TLS=managed`); a member with a third of it left is \
     replaced",
);
pub const MEMBER_CERT_EXTRA_SANS: Var = Var::new(
    "MEMBER_CERT_EXTRA_SANS",
    "",
    "further names in every member's certificate, comma-separated: the load balancer's DNS \
     name clients connect to (the template sets it)",
)
.noted("unset");
pub const MEMBER_CERT_SECS: Var = Var::new(
    "MEMBER_CERT_SECS",
    "",
    "a member certificate's life in seconds instead of `MEMBER_CERT_DAYS` (the rotation test)",
)
.noted("unset (tests only)");
pub const PKI_KMS_KEY_ID: Var = Var::new(
    "PKI_KMS_KEY_ID",
    "",
    "the KMS key of the CA's and member keys' SecureStrings",
)
.noted("unset (`aws/ssm`)");
pub const ETCD_METRICS_PORT: Var = Var::new(
    "ETCD_METRICS_PORT",
    "2381",
    "with `TLS=managed`, members also serve `/health` and `/metrics` in plain HTTP here",
);
pub const ETCD_AUTH: Var = Var::new(
    "ETCD_AUTH",
    "",
    "`on`: the function turns etcd's authentication on once the cluster serves \
     ([TLS](tls.md)), an adopted cluster's too; unset (or blank): as `on` with `TLS=managed`, \
     except that an adopted cluster's is left as it was found \
     ([Adopting](adopting.md#authentication-after-the-adoption)); `off`: it does not (nor off \
     again once on); `on` needs `TLS=managed`",
)
.noted("`on` with `TLS=managed` (an adopted cluster's as found), else `off`");
pub const ETCD_CA_FILE: Var = Var::new(
    "ETCD_CA_FILE",
    "",
    "TLS to etcd without `TLS=managed`: the CA's certificate (PEM); all three files or none",
)
.noted("unset");
pub const ETCD_CERT_FILE: Var = Var::new(
    "ETCD_CERT_FILE",
    "",
    "…the function's client certificate (PEM). etcd's own server certificate needs \
     `clientAuth` usage too: its JSON gateway presents it to etcd's gRPC server",
)
.noted("unset");
pub const ETCD_KEY_FILE: Var = Var::new("ETCD_KEY_FILE", "", "…and its key (PEM)").noted("unset");

// Backups and recovery.
pub const BACKUP_BUCKET: Var = Var::new(
    "BACKUP_BUCKET",
    "",
    "the S3 bucket snapshots go to ([Backups](backups.md))",
)
.noted("unset (backups off)");
pub const BACKUP_PREFIX: Var = Var::new(
    "BACKUP_PREFIX",
    "",
    "key prefix; one folder per cluster token below it",
)
.noted("`PARAMETER_PREFIX` without its leading `/`");
pub const BACKUP_INTERVAL_MINUTES: Var = Var::new(
    "BACKUP_INTERVAL_MINUTES",
    "15",
    "snapshot interval (skipped while the revision stands still)",
);
pub const BACKUP_HOURLY_DAYS: Var = Var::new(
    "BACKUP_HOURLY_DAYS",
    "7",
    "one snapshot an hour is kept this many days…",
);
pub const BACKUP_DAILY_DAYS: Var = Var::new("BACKUP_DAILY_DAYS", "90", "…and one a day this many");
pub const RECOVERY: Var = Var::new(
    "RECOVERY",
    "auto",
    "when every member is lost: `auto` restores the freshest backup, `manual` waits for \
     `<prefix>/restore-request`",
);

pub const START_FROM: Var = Var::new(
    "START_FROM",
    "empty",
    "a new stack's first cluster: `empty`, or `backup`: no empty cluster is ever started; the \
     first launches are held until `etcd-asg restore` names the backup to start from",
);

pub const ADOPT_ENDPOINTS: Var = Var::new(
    "ADOPT_ENDPOINTS",
    "",
    "an etcd cluster that runs already, adopted with no downtime: its client URLs, \
     comma-separated; `http` with `TLS=off`, `https` with `TLS=managed` and its CA imported \
     (`etcd-asg adopt-secrets`, also for its root password: [Adopting a cluster](adopting.md))",
)
.noted("unset (nothing to adopt)");

// Maintenance.
pub const DEFRAG_FREE_PERCENT: Var = Var::new(
    "DEFRAG_FREE_PERCENT",
    "50",
    "defragment a member when this share of its database file is free…",
);
pub const DEFRAG_MIN_BYTES: Var = Var::new(
    "DEFRAG_MIN_BYTES",
    "104857600",
    "…and the file is at least this large",
)
.noted("(100 MiB)");

// Timing.
pub const ETCD_REQUEST_TIMEOUT_MS: Var =
    Var::new("ETCD_REQUEST_TIMEOUT_MS", "3000", "one etcd request");
pub const LEARNER_START_TIMEOUT_SECS: Var = Var::new(
    "LEARNER_START_TIMEOUT_SECS",
    "900",
    "a learner that has not started this long after its config was published is removed and \
     its launch abandoned",
);
pub const UNHEALTHY_REPLACE_SECS: Var = Var::new(
    "UNHEALTHY_REPLACE_SECS",
    "300",
    "a voter whose etcd has not answered this long while its instance is in service is \
     replaced: the function marks the instance `Unhealthy` (one at a time, only while the other \
     voters keep a quorum)",
);
pub const WAIT_BUDGET_SECS: Var = Var::new(
    "WAIT_BUDGET_SECS",
    "120",
    "how long one invocation waits on slow steps and retries before leaving them to the next \
     event or schedule",
);
pub const POLL_INTERVAL_MS: Var = Var::new(
    "POLL_INTERVAL_MS",
    "2000",
    "pause between observations while waiting; base of the retry backoff (with jitter)",
);
pub const DEADLINE_MARGIN_MS: Var = Var::new(
    "DEADLINE_MARGIN_MS",
    "5000",
    "stop starting steps this long before the Lambda deadline",
);
pub const FAILPOINT_CRASH_AFTER: Var = Var::new(
    "FAILPOINT_CRASH_AFTER",
    "",
    "abort right after a step of this name succeeds",
)
.noted("unset (tests only)");

/// All of them, in the docs' order.
pub const VARIABLES: &[Var] = &[
    ASG_NAME,
    LAUNCH_HOOK_NAME,
    TERMINATE_HOOK_NAME,
    CLUSTER_NAME,
    PARAMETER_PREFIX,
    ADDRESS_SOURCE,
    ETCD_PEER_SCHEME,
    ETCD_PEER_PORT,
    ETCD_CLIENT_SCHEME,
    ETCD_CLIENT_PORT,
    AUTO_COMPACTION_RETENTION,
    QUOTA_BACKEND_BYTES,
    SNAPSHOT_COUNT,
    TLS,
    MEMBER_CERT_DAYS,
    MEMBER_CERT_EXTRA_SANS,
    MEMBER_CERT_SECS,
    PKI_KMS_KEY_ID,
    ETCD_METRICS_PORT,
    ETCD_AUTH,
    ETCD_CA_FILE,
    ETCD_CERT_FILE,
    ETCD_KEY_FILE,
    BACKUP_BUCKET,
    BACKUP_PREFIX,
    BACKUP_INTERVAL_MINUTES,
    BACKUP_HOURLY_DAYS,
    BACKUP_DAILY_DAYS,
    RECOVERY,
    START_FROM,
    ADOPT_ENDPOINTS,
    DEFRAG_FREE_PERCENT,
    DEFRAG_MIN_BYTES,
    ETCD_REQUEST_TIMEOUT_MS,
    LEARNER_START_TIMEOUT_SECS,
    UNHEALTHY_REPLACE_SECS,
    WAIT_BUDGET_SECS,
    POLL_INTERVAL_MS,
    DEADLINE_MARGIN_MS,
    FAILPOINT_CRASH_AFTER,
];

/// The docs' table of every variable: `| name | default | meaning |`.
pub fn table() -> String {
    let mut out = String::from("| variable | default | meaning |\n| --- | --- | --- |\n");
    for v in VARIABLES {
        out += &format!("| `{}` | {} | {} |\n", v.name, v.shown_default(), v.doc);
    }
    out
}
