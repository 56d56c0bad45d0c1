//! The group's instances (Auto Scaling + EC2) and its lifecycle actions.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_autoscaling::config::http::HttpResponse;
use aws_sdk_autoscaling::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_autoscaling::types::LifecycleState as AwsLifecycleState;

use super::sdk::aws;
use crate::config::AddressSource;
use crate::error::Error;
use crate::event::shown;
use crate::model::{
    is_valid_address, ActionResult, GroupState, Instance, LifecycleState, Transition,
};
use crate::ports::{Completion, Group, Hook, Lifecycle};

/// Instances EC2 did not describe, and why.
type Failed = std::collections::BTreeMap<String, String>;

pub struct AutoScalingGroup {
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub group: String,
    pub address: AddressSource,
    /// What EC2 told of each instance once it had an address and a version tag: an instance's
    /// address, launch time and version do not change while it runs, so EC2 is asked only of the others (a new instance, or
    /// one still without an address). Kept for the warm environment; forgotten when the
    /// instance leaves the group or goes past its terminate hook. With `ADDRESS_SOURCE=tag:…`
    /// the tag is read once per instance and environment: a tag changed later is not seen
    /// (docs/configuration.md).
    known: Mutex<HashMap<String, Described>>,
}

/// What EC2 tells of one instance: its address (as ADDRESS_SOURCE says), launch time, and the
/// etcd release its `etcd-asg-etcd-version` tag declares.
#[derive(Clone, Debug, Default)]
struct Described {
    address: Option<String>,
    launched: i64,
    version: Option<crate::model::Version>,
}

impl AutoScalingGroup {
    pub fn new(
        autoscaling: aws_sdk_autoscaling::Client,
        ec2: aws_sdk_ec2::Client,
        group: String,
        address: AddressSource,
    ) -> Self {
        Self {
            autoscaling,
            ec2,
            group,
            address,
            known: Mutex::default(),
        }
    }

    /// This group, as DescribeAutoScalingGroups tells it.
    async fn group(&self) -> Result<aws_sdk_autoscaling::types::AutoScalingGroup, Error> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(&self.group)
            .send()
            .await
            .map_err(|e| aws("DescribeAutoScalingGroups")(e.into()))?;
        out.auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(self.group.as_str()))
            .cloned()
            .ok_or_else(|| Error::GroupNotFound(self.group.clone()))
    }

    /// EC2's address and launch time of each of `ids` it describes, and why it did not
    /// describe the others. One DescribeInstances for all; if it fails (EC2 fails the whole call
    /// for an id it does not know yet, and for one in a zone with a service disruption:
    /// <https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html>), one
    /// for each, at once, so that only the ids EC2 fails for go without. An instance EC2
    /// answers for but does not list (gone) has no address and is not among the failed.
    async fn ask_ec2(&self, ids: Vec<String>) -> (HashMap<String, Described>, Failed) {
        if ids.is_empty() {
            return Default::default();
        }
        let all = self.describe_instances(ids.clone()).await;
        let Err((why, per_instance)) = all else {
            return (all.unwrap_or_default(), Failed::new());
        };
        // Throttled, or no answer at all: asking once per instance would only add to it.
        if ids.len() == 1 || !per_instance {
            return (
                HashMap::new(),
                ids.into_iter().map(|id| (id, why.clone())).collect(),
            );
        }
        let each = ids
            .iter()
            .map(|id| async move { (id, self.describe_instances(vec![id.clone()]).await) });
        let mut found = HashMap::new();
        let mut failed = Failed::new();
        for (id, answer) in futures_util::future::join_all(each).await {
            match answer {
                Ok(one) => found.extend(one),
                Err((why, _)) => {
                    failed.insert(id.clone(), why);
                }
            }
        }
        (found, failed)
    }

    /// One DescribeInstances for `ids`: each listed instance's address and launch time, or why
    /// EC2 answered none (its error code and message; "not yet known to EC2" for an id it does
    /// not know, as a new instance is for a while:
    /// <https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html>), and whether
    /// asking for each alone may do better (not when EC2 throttles, nor when nothing answered).
    async fn describe_instances(
        &self,
        ids: Vec<String>,
    ) -> Result<HashMap<String, Described>, (String, bool)> {
        let mut out = HashMap::new();
        let mut pages = self
            .ec2
            .describe_instances()
            .set_instance_ids(Some(ids))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| match e.code() {
                Some("InvalidInstanceID.NotFound") => (
                    "InvalidInstanceID.NotFound: not yet known to EC2".to_string(),
                    true,
                ),
                Some(code) => {
                    let throttled = matches!(code, "RequestLimitExceeded" | "Throttling");
                    let why = format!("{code}: {}", e.message().unwrap_or_default());
                    (why, !throttled)
                }
                None => (format!("{:?}", aws("DescribeInstances")(e.into())), false),
            })?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                let Some(id) = i.instance_id() else { continue };
                let launched = i.launch_time().map_or(0, |t| t.secs());
                let described = Described {
                    address: self.address_of(id, i),
                    launched,
                    version: version_of(id, i),
                };
                out.insert(id.to_string(), described);
            }
        }
        Ok(out)
    }

    /// The instance's address as ADDRESS_SOURCE says; one that is not an IP address or host
    /// name is none at all, and the instance is never seeded or joined.
    fn address_of(&self, id: &str, i: &aws_sdk_ec2::types::Instance) -> Option<String> {
        let address = match &self.address {
            AddressSource::PrivateIp => i.private_ip_address().map(str::to_string),
            AddressSource::Tag(key) => i
                .tags()
                .iter()
                .find(|t| t.key() == Some(key.as_str()))
                .and_then(|t| t.value().map(str::to_string)),
        };
        address.filter(|a| {
            let ok = is_valid_address(a);
            if !ok {
                tracing::warn!(instance = id, value = %shown(a), "address rejected: not an IP address or host name");
            }
            ok
        })
    }
}

/// The release an instance's `etcd-asg-etcd-version` tag declares; a tag that is not a version is
/// none at all (logged), and the instance is never seeded or joined.
fn version_of(id: &str, i: &aws_sdk_ec2::types::Instance) -> Option<crate::model::Version> {
    let tag = i
        .tags()
        .iter()
        .find(|t| t.key() == Some(crate::model::VERSION_TAG))?
        .value()?;
    tag.parse()
        .map_err(|e: String| {
            tracing::warn!(instance = id, tag = crate::model::VERSION_TAG, value = %shown(tag), "version tag rejected: {}", shown(&e));
        })
        .ok()
}

impl Group for AutoScalingGroup {
    /// One DescribeAutoScalingGroups.
    async fn list(&self) -> Result<GroupState, Error> {
        let group = self.group().await?;
        let desired_capacity = group.desired_capacity().unwrap_or(0).max(0) as u32;
        let group_arn = group.auto_scaling_group_arn().unwrap_or_default();
        let arn_prefix = instance_arn_prefix(group_arn).ok_or_else(|| Error::Aws {
            operation: "DescribeAutoScalingGroups",
            source: format!(
                "group ARN {} is not arn:<partition>:autoscaling:<region>:<account>:…",
                shown(group_arn)
            )
            .into(),
        })?;
        let instances = group
            .instances()
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                let state = i.lifecycle_state().map_or("", AwsLifecycleState::as_str);
                Some(Instance {
                    arn: format!("{arn_prefix}{id}"),
                    id,
                    state: LifecycleState::parse(state),
                    address: None,
                    launched_at: 0,
                    // "Healthy" or "Unhealthy"; anything else is not a mark against it.
                    healthy: i.health_status() != Some("Unhealthy"),
                    zone: i.availability_zone().map(str::to_string),
                    etcd_version: None,
                })
            })
            .collect();
        let zones = group.availability_zones().to_vec();
        let suspended = group
            .suspended_processes()
            .iter()
            .filter_map(|p| p.process_name().map(str::to_string))
            .collect();
        Ok(GroupState {
            instances,
            desired_capacity,
            undescribed: Default::default(),
            zones,
            suspended,
        })
    }

    /// DescribeInstances only for instances not seen with an address before (`known`).
    async fn locate(&self, mut group: GroupState) -> GroupState {
        // Only instances that may still run etcd need an address: one on its way out past its
        // hook, or terminated, has none that matters (and its address may be handed on).
        let ids: Vec<String> = group
            .instances
            .iter()
            .filter(|i| i.state.is_present())
            .map(|i| i.id.clone())
            .collect();
        let mut known = self.known.lock().unwrap().clone();
        known.retain(|id, _| ids.contains(id));
        let ask: Vec<String> = ids
            .iter()
            .filter(|id| !known.contains_key(*id))
            .cloned()
            .collect();
        let (found, failed) = self.ask_ec2(ask).await;
        for (id, d) in &found {
            // Asked again until EC2 tells both (the group propagates the version tag at the
            // instance's launch, so in AWS both come together).
            if d.address.is_some() && d.version.is_some() {
                known.insert(id.clone(), d.clone());
            }
        }
        for i in &mut group.instances {
            if let Some(d) = known.get(&i.id).or_else(|| found.get(&i.id)) {
                (i.address, i.launched_at) = (d.address.clone(), d.launched);
                i.etcd_version = d.version;
            }
        }
        for (id, why) in &failed {
            tracing::warn!(instance = %id, %why, "EC2 did not describe this instance: it goes without EC2's address this time");
        }
        *self.known.lock().unwrap() = known;
        group.undescribed = failed;
        group
    }

    async fn has_warm_pool(&self) -> Result<bool, Error> {
        let out = self
            .autoscaling
            .describe_warm_pool()
            .auto_scaling_group_name(&self.group)
            .send()
            .await
            .map_err(|e| aws("DescribeWarmPool")(e.into()))?;
        Ok(out.warm_pool_configuration().is_some())
    }

    async fn set_unhealthy(&self, instance: &str) -> Result<(), Error> {
        self.autoscaling
            .set_instance_health()
            .instance_id(instance)
            .health_status("Unhealthy")
            .should_respect_grace_period(false)
            .send()
            .await
            .map_err(|e| aws("SetInstanceHealth")(e.into()))?;
        Ok(())
    }
}

/// The prefix of the group tags that carry the function's settings, for the CLI: a deployed
/// stack tags its group `etcd-asg-lifecycle:<VARIABLE>` = the value the function has.
pub const SETTING_TAG_PREFIX: &str = "etcd-asg-lifecycle:";

/// The group CloudFormation made for `stack` (tagged `aws:cloudformation:stack-name`), and the
/// function settings its tags carry, by variable name (`ASG_NAME` included).
pub async fn settings_of_stack(
    autoscaling: &aws_sdk_autoscaling::Client,
    stack: &str,
) -> Result<HashMap<String, String>, Error> {
    use aws_sdk_autoscaling::types::Filter;
    let out = autoscaling
        .describe_auto_scaling_groups()
        .filters(
            Filter::builder()
                .name("tag:aws:cloudformation:stack-name")
                .values(stack)
                .build(),
        )
        .send()
        .await
        .map_err(|e| aws("DescribeAutoScalingGroups")(e.into()))?;
    let ours: Vec<_> = out
        .auto_scaling_groups()
        .iter()
        .filter(|g| {
            g.tags()
                .iter()
                .any(|t| t.key().is_some_and(|k| k.starts_with(SETTING_TAG_PREFIX)))
        })
        .collect();
    let group = match ours.as_slice() {
        [one] => one,
        [] => {
            return Err(Error::Config {
                var: "--stack".into(),
                value: stack.into(),
                reason: format!(
                    "has no Auto Scaling group tagged {SETTING_TAG_PREFIX}*: is it an etcd-asg-lifecycle stack in this region?"
                ),
            })
        }
        _ => {
            return Err(Error::Config {
                var: "--stack".into(),
                value: stack.into(),
                reason: "has more than one etcd-asg-lifecycle group".into(),
            })
        }
    };
    let mut vars: HashMap<String, String> = group
        .tags()
        .iter()
        .filter_map(|t| {
            let var = t.key()?.strip_prefix(SETTING_TAG_PREFIX)?;
            Some((var.to_string(), t.value()?.to_string()))
        })
        .collect();
    if let Some(name) = group.auto_scaling_group_name() {
        vars.insert("ASG_NAME".into(), name.into());
    }
    Ok(vars)
}

/// From `arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:…` to
/// `arn:aws:ec2:us-east-1:123456789012:instance/`.
pub fn instance_arn_prefix(group_arn: &str) -> Option<String> {
    let mut parts = group_arn.splitn(6, ':');
    let (arn, partition, service, region, account) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    (arn == "arn" && service == "autoscaling" && ok(partition) && ok(region) && ok(account))
        .then(|| format!("arn:{partition}:ec2:{region}:{account}:instance/"))
}

pub struct LifecycleHooks {
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub group: String,
    pub launch_hook: String,
    pub terminate_hook: String,
}

impl LifecycleHooks {
    fn hook(&self, transition: Transition) -> &str {
        match transition {
            Transition::Launch => &self.launch_hook,
            Transition::Terminate => &self.terminate_hook,
        }
    }
}

/// AWS's answer for an action it no longer holds means, for an idempotent caller, "already done".
fn completion<O, E>(
    operation: &'static str,
    r: Result<O, SdkError<E, HttpResponse>>,
) -> Result<Completion, Error>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match r {
        Ok(_) => Ok(Completion::Done),
        Err(e)
            if e.code() == Some("ValidationError")
                && e.message()
                    .is_some_and(|m| m.contains("No active Lifecycle Action found")) =>
        {
            Ok(Completion::NotPending)
        }
        Err(e) => Err(aws(operation)(e.into())),
    }
}

impl Lifecycle for LifecycleHooks {
    async fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> Result<Completion, Error> {
        let r = self
            .autoscaling
            .complete_lifecycle_action()
            .auto_scaling_group_name(&self.group)
            .lifecycle_hook_name(self.hook(transition))
            .instance_id(instance)
            .lifecycle_action_result(result.as_str())
            .send()
            .await;
        completion("CompleteLifecycleAction", r)
    }

    async fn heartbeat(&self, instance: &str, transition: Transition) -> Result<Completion, Error> {
        let r = self
            .autoscaling
            .record_lifecycle_action_heartbeat()
            .auto_scaling_group_name(&self.group)
            .lifecycle_hook_name(self.hook(transition))
            .instance_id(instance)
            .send()
            .await;
        completion("RecordLifecycleActionHeartbeat", r)
    }

    async fn hooks(&self) -> Result<Vec<Hook>, Error> {
        let out = self
            .autoscaling
            .describe_lifecycle_hooks()
            .auto_scaling_group_name(&self.group)
            .send()
            .await
            .map_err(|e| aws("DescribeLifecycleHooks")(e.into()))?;
        Ok(out
            .lifecycle_hooks()
            .iter()
            .filter_map(|h| {
                Some(Hook {
                    name: h.lifecycle_hook_name()?.to_string(),
                    // AWS's default when unset: one hour.
                    heartbeat_timeout: std::time::Duration::from_secs(
                        h.heartbeat_timeout().unwrap_or(3600).max(0) as u64,
                    ),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::instance_arn_prefix;

    #[test]
    fn instance_arns_come_from_the_group_arn() {
        let group = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:\
                     6d7c4f8a-0000-4000-8000-000000000000:autoScalingGroupName/etcd";
        assert_eq!(
            instance_arn_prefix(group).as_deref(),
            Some("arn:aws:ec2:us-east-1:123456789012:instance/")
        );
        let cn = "arn:aws-cn:autoscaling:cn-north-1:123456789012:autoScalingGroup:x";
        assert_eq!(
            instance_arn_prefix(cn).as_deref(),
            Some("arn:aws-cn:ec2:cn-north-1:123456789012:instance/")
        );
        for bad in [
            "",
            "arn:aws:ec2:us-east-1:1:instance/i-1",
            "arn:aws:autoscaling::1:x",
            "arn:a*:autoscaling:r:1:x",
        ] {
            assert_eq!(instance_arn_prefix(bad), None, "{bad}");
        }
    }
}
