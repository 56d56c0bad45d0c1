//! Identity and set-up: what an environment needs before its first observation. The group's
//! hooks exist and it has no warm pool (`prepare`, once per environment); with TLS=managed the
//! stack's CA and token key are read or created (`cluster_ca`, create-only) and the etcd client
//! presents the function's certificate (`identify`, each invocation, free once done). A CA
//! rollover would go here: the CA is read here and nowhere else.
//!
//! What ADOPT_ENDPOINTS means is not read here but taken from `observe.rs` (`Adoption`).

use std::collections::BTreeMap;

use super::Reconciler;
use crate::error::Error;
use crate::model::{Timestamp, Transition};
use crate::ports::{Backups, Created, Group, Lifecycle, Members, PublishedConfig, Secrets};

impl<G: Group, L: Lifecycle, P: PublishedConfig + Secrets, M: Members, B: Backups>
    Reconciler<G, L, P, M, B>
{
    /// What an environment needs AWS for before its first observation, done by its first
    /// invocation rather than at cold start (which then makes no call at all): the group's hooks
    /// exist, and with TLS=managed the cluster's CA and token key are read (or created) and the
    /// etcd client presents the function's certificate. A failure fails that invocation
    /// (`Fatal.Config` for a missing hook) and the next one tries again.
    pub async fn prepare(&self) -> Result<(), Error> {
        self.prepared
            .get_or_try_init(|| async {
                self.check_hooks().await?;
                self.refuse_warm_pool().await
            })
            .await?;
        self.identify().await
    }

    /// TLS=managed: the cluster's CA and token key, read (or created), and the etcd client
    /// presenting the function's certificate; with ADOPT_ENDPOINTS, the adopted cluster's root
    /// password where the operator stored one. What the CLI needs before it observes. Each
    /// invocation: done once, it costs nothing.
    pub async fn identify(&self) -> Result<(), Error> {
        self.adopted_root_password().await?;
        if self.config.pki.is_none() {
            return Ok(());
        }
        let ca = match self.ca.get() {
            Some(ca) => ca,
            None => {
                let name = &self.config.settings.cluster_name;
                // A cluster adopted over TLS: its own CA, imported by the operator.
                let create = !self.adoption().over_tls();
                match cluster_ca(&self.published, name, (self.clock)(), create).await? {
                    Some(ca) => self.ca.get_or_init(|| ca),
                    None => {
                        tracing::error!(
                            "ADOPT_ENDPOINTS names a cluster with TLS, and its CA is not imported \
                             yet: etcd-asg adopt-secrets --ca-cert FILE --ca-key FILE (docs/adopting.md)"
                        );
                        return Ok(());
                    }
                }
            }
        };
        self.members.identify(ca)
    }

    /// An adopted cluster's root password, if the operator stored one, handed to the etcd
    /// client: while ADOPT_ENDPOINTS is set, and with TLS=off for good (a plain-HTTP cluster
    /// adopted with authentication on has no root but by it: the function signs tokens only
    /// with TLS=managed). Read each invocation (one parameter): a password corrected by the
    /// operator is used at once, by warm environments too. Not read: a WARN, and the invocation
    /// goes on (heartbeats need nothing of it).
    async fn adopted_root_password(&self) -> Result<(), Error> {
        let adoption = self.adoption();
        if !adoption.asked() && self.config.pki.is_some() {
            return Ok(());
        }
        match self.published.load_root_password().await {
            Ok(Some(password)) => self
                .members
                .use_root_password(password, adoption.endpoints()),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the adopted cluster's root password not read"),
        }
        Ok(())
    }

    /// Warm pools are not supported: Auto Scaling stops an instance as soon as it launches into
    /// the pool, without waiting for its user data, and cloud-init runs user data only at the
    /// first boot; the launch hook pauses it twice, and with ReuseOnScaleIn a member's instance
    /// goes back into the pool with its data
    /// (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/warm-pool-instance-lifecycle.html>).
    /// A group that has one fails every invocation (`Fatal.Config`) until the pool is deleted.
    pub async fn refuse_warm_pool(&self) -> Result<(), Error> {
        if !self.group.has_warm_pool().await? {
            return Ok(());
        }
        Err(Error::Config {
            var: "ASG_NAME".into(),
            value: self.config.group_name.clone(),
            reason: "has a warm pool, which etcd-asg-lifecycle does not support (a warm instance is stopped before its boot script runs, and one reused on scale-in keeps a removed member's data): delete it (aws autoscaling delete-warm-pool --auto-scaling-group-name <group> --force-delete)".into(),
        })
    }

    /// Both hooks must exist on the group, or no instance would ever be held for us (and every
    /// event would be for nothing).
    pub async fn check_hooks(&self) -> Result<(), Error> {
        let hooks = self.lifecycle.hooks().await?;
        let names: Vec<&String> = hooks.iter().map(|h| &h.name).collect();
        let mut timeouts = BTreeMap::new();
        for (var, hook, transition) in [
            (
                "LAUNCH_HOOK_NAME",
                &self.config.launch_hook,
                Transition::Launch,
            ),
            (
                "TERMINATE_HOOK_NAME",
                &self.config.terminate_hook,
                Transition::Terminate,
            ),
        ] {
            if let Some(h) = hooks.iter().find(|h| &h.name == hook) {
                timeouts.insert(transition, h.heartbeat_timeout);
            } else {
                return Err(Error::Config {
                    var: var.into(),
                    value: hook.clone(),
                    reason: format!(
                        "is not a lifecycle hook of group {:?} (it has {names:?})",
                        self.config.group_name
                    ),
                });
            }
        }
        let _ = self.hooks.timeouts.set(timeouts);
        Ok(())
    }
}

/// TLS=managed: the cluster's CA and its token key, each created (create-only) if there is none
/// yet; the CA only if `create` (None: there is none, and it is not ours to make). The CA's
/// remaining life is logged each time.
pub async fn cluster_ca(
    secrets: &impl Secrets,
    cluster: &str,
    now: Timestamp,
    create: bool,
) -> Result<Option<crate::pki::Ca>, Error> {
    if !create && secrets.load_ca().await?.is_none() {
        return Ok(None);
    }
    let mut ca = load_or_create(
        "CA",
        async || secrets.load_ca().await,
        || crate::pki::Ca::generate(cluster, now),
        async |fresh| secrets.create_ca(fresh).await,
    )
    .await?;
    ca.token_key = Some(
        load_or_create(
            "token key",
            async || secrets.load_token_key().await,
            crate::pki::generate_token_key,
            async |fresh| secrets.create_token_key(fresh).await,
        )
        .await?,
    );
    let days_left = (ca.not_after - now) / 86_400;
    if days_left < 365 {
        tracing::error!(
            days_left,
            not_after = ca.not_after,
            "the cluster's CA ends within a year: plan its replacement (README, TLS)"
        );
    } else {
        tracing::info!(days_left, not_after = ca.not_after, "cluster CA");
    }
    Ok(Some(ca))
}

/// One of the cluster's secrets that exists once: read it, else create it (create-only); when
/// another invocation created it first, read that one.
pub(super) async fn load_or_create<T>(
    what: &'static str,
    load: impl AsyncFn() -> Result<Option<T>, Error>,
    generate: impl FnOnce() -> Result<T, Error>,
    create: impl AsyncFnOnce(&T) -> Result<crate::ports::Created, Error>,
) -> Result<T, Error> {
    if let Some(found) = load().await? {
        return Ok(found);
    }
    let fresh = generate()?;
    match create(&fresh).await? {
        Created::Created => {
            tracing::warn!("created the cluster's {what}");
            Ok(fresh)
        }
        Created::AlreadyExists => load().await?.ok_or(Error::Pki {
            what: "reading a cluster secret",
            detail: format!("the {what} exists and then does not: deleted by hand?"),
        }),
    }
}
