//! The group's instances (Auto Scaling + EC2) and its lifecycle actions.

use std::collections::HashMap;

use aws_sdk_autoscaling::config::http::HttpResponse;
use aws_sdk_autoscaling::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_autoscaling::types::LifecycleState as AwsLifecycleState;

use super::aws;
use crate::config::AddressSource;
use crate::error::Error;
use crate::event::shown;
use crate::model::{is_valid_address, ActionResult, Instance, LifecycleState, Transition};
use crate::ports::{Completion, Group, Lifecycle};

pub struct AutoScalingGroup {
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub group: String,
    pub address: AddressSource,
}

impl Group for AutoScalingGroup {
    async fn instances(&self) -> Result<Vec<Instance>, Error> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(&self.group)
            .send()
            .await
            .map_err(|e| aws("DescribeAutoScalingGroups")(e.into()))?;
        let group = out
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(self.group.as_str()))
            .ok_or_else(|| Error::GroupNotFound(self.group.clone()))?;
        let states: Vec<(String, LifecycleState)> = group
            .instances()
            .iter()
            .filter_map(|i| {
                let state = i.lifecycle_state().map_or("", AwsLifecycleState::as_str);
                Some((i.instance_id()?.to_string(), LifecycleState::parse(state)))
            })
            .collect();
        if states.is_empty() {
            return Ok(vec![]);
        }
        // Address and launch time: EC2's. An instance EC2 no longer knows keeps no address.
        let mut details: HashMap<String, (Option<String>, i64)> = HashMap::new();
        let mut pages = self
            .ec2
            .describe_instances()
            .set_instance_ids(Some(states.iter().map(|(id, _)| id.clone()).collect()))
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
        Ok(states
            .into_iter()
            .map(|(id, state)| {
                let (address, launched_at) = details.remove(&id).unwrap_or((None, 0));
                Instance {
                    id,
                    state,
                    address,
                    launched_at,
                }
            })
            .collect())
    }
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
}
