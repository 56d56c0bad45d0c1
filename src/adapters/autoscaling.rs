//! The group's instances (Auto Scaling + EC2) and its lifecycle actions.

use std::collections::HashMap;

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
}

impl AutoScalingGroup {
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
}

impl Group for AutoScalingGroup {
    async fn describe(&self) -> Result<GroupState, Error> {
        let group = self.group().await?;
        let desired_capacity = group.desired_capacity().unwrap_or(0).max(0) as u32;
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
        if states.is_empty() {
            return Ok(GroupState {
                instances: vec![],
                desired_capacity,
            });
        }
        // Address and launch time: EC2's. An instance EC2 no longer knows keeps no address.
        let mut details: HashMap<String, (Option<String>, i64)> = HashMap::new();
        let mut pages = self
            .ec2
            .describe_instances()
            .set_instance_ids(Some(states.iter().map(|(id, ..)| id.clone()).collect()))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| aws("DescribeInstances")(e.into()))?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                let Some(id) = i.instance_id() else { continue };
                let address = match &self.address {
                    AddressSource::PrivateIp => i.private_ip_address().map(str::to_string),
                    AddressSource::Tag(key) => i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some(key.as_str()))
                        .and_then(|t| t.value().map(str::to_string)),
                };
                // An instance without a usable address is never seeded or joined.
                let address = address.filter(|a| {
                    let ok = is_valid_address(a);
                    if !ok {
                        tracing::warn!(instance = id, value = %shown(a), "address rejected: not an IP address or host name");
                    }
                    ok
                });
                let launched = i.launch_time().map_or(0, |t| t.secs());
                details.insert(id.to_string(), (address, launched));
            }
        }
        let instances = states
            .into_iter()
            .map(|(id, state, healthy)| {
                let (address, launched_at) = details.remove(&id).unwrap_or((None, 0));
                Instance {
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

impl AutoScalingGroup {
    /// `arn:<partition>:ec2:<region>:<account>:instance/`, from the group's own ARN: what an
    /// instance's requests carry as `ec2:SourceInstanceARN`, less the instance id.
    pub async fn instance_arn_prefix(&self) -> Result<String, Error> {
        let group = self.group().await?;
        let arn = group.auto_scaling_group_arn().unwrap_or_default();
        instance_arn_prefix(arn).ok_or_else(|| Error::Aws {
            operation: "DescribeAutoScalingGroups",
            source: format!(
                "group ARN {} is not arn:<partition>:autoscaling:<region>:<account>:…",
                shown(arn)
            )
            .into(),
        })
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
