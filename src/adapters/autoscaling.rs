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
use crate::ports::{Completion, Group, Lifecycle};

pub struct AutoScalingGroup {
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub group: String,
    pub address: AddressSource,
    /// What EC2 told of each instance once it had an address: an instance's address and launch
    /// time do not change while it runs, so EC2 is asked only of the others (a new instance, or
    /// one still without an address). Kept for the warm environment; forgotten when the
    /// instance leaves the group or goes past its terminate hook. With `ADDRESS_SOURCE=tag:…`
    /// the tag is read once per instance and environment: a tag changed later is not seen
    /// (docs/configuration.md).
    known: Mutex<HashMap<String, (String, i64)>>,
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

    /// Address and launch time of each of `ids`: EC2's, for those not known yet. An instance
    /// EC2 no longer knows keeps no address.
    async fn details(
        &self,
        ids: &[String],
    ) -> Result<HashMap<String, (Option<String>, i64)>, Error> {
        let mut known = self.known.lock().unwrap().clone();
        known.retain(|id, _| ids.contains(id));
        let ask: Vec<String> = ids
            .iter()
            .filter(|id| !known.contains_key(*id))
            .cloned()
            .collect();
        let mut out: HashMap<String, (Option<String>, i64)> = known
            .iter()
            .map(|(id, (address, at))| (id.clone(), (Some(address.clone()), *at)))
            .collect();
        if !ask.is_empty() {
            let mut pages = self
                .ec2
                .describe_instances()
                .set_instance_ids(Some(ask))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| aws("DescribeInstances")(e.into()))?;
                for i in page.reservations().iter().flat_map(|r| r.instances()) {
                    let Some(id) = i.instance_id() else { continue };
                    let launched = i.launch_time().map_or(0, |t| t.secs());
                    let address = self.address_of(id, i);
                    if let Some(a) = &address {
                        known.insert(id.to_string(), (a.clone(), launched));
                    }
                    out.insert(id.to_string(), (address, launched));
                }
            }
        }
        *self.known.lock().unwrap() = known;
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

impl Group for AutoScalingGroup {
    /// One DescribeAutoScalingGroups, and DescribeInstances only for instances not seen with an
    /// address before.
    async fn describe(&self) -> Result<GroupState, Error> {
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
        let states: Vec<(String, LifecycleState, bool)> = group
            .instances()
            .iter()
            .filter_map(|i| {
                let state = i.lifecycle_state().map_or("", AwsLifecycleState::as_str);
                // "Healthy" or "Unhealthy"; anything else is not a mark against it.
                let healthy = i.health_status() != Some("Unhealthy");
                Some((
                    i.instance_id()?.to_string(),
                    LifecycleState::parse(state),
                    healthy,
                ))
            })
            .collect();
        // Only instances that may still run etcd need an address: one on its way out past its
        // hook, or terminated, has none that matters (and its address may be handed on).
        let ids: Vec<String> = states
            .iter()
            .filter(|(_, state, _)| state.is_present())
            .map(|(id, ..)| id.clone())
            .collect();
        let mut details = self.details(&ids).await?;
        let instances = states
            .into_iter()
            .map(|(id, state, healthy)| {
                let (address, launched_at) = details.remove(&id).unwrap_or((None, 0));
                Instance {
                    arn: format!("{arn_prefix}{id}"),
                    id,
                    state,
                    address,
                    launched_at,
                    healthy,
                }
            })
            .collect();
        Ok(GroupState {
            instances,
            desired_capacity,
        })
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

    async fn hook_names(&self) -> Result<Vec<String>, Error> {
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
            .filter_map(|h| h.lifecycle_hook_name().map(str::to_string))
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
