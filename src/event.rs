//! Incoming events: parsed leniently, validated strictly. An event is only a hint to reconcile;
//! a bad one is rejected with the field and value that made it bad, and changes nothing.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use serde::Deserialize;
use serde_json::Value;

use crate::model::Transition;

const LAUNCH_DETAIL: &str = "EC2 Instance-launch Lifecycle Action";
const TERMINATE_DETAIL: &str = "EC2 Instance-terminate Lifecycle Action";
const TEST_NOTIFICATION: &str = "autoscaling:TEST_NOTIFICATION";
/// Longer than any name or token AWS produces; longer values are hostile or broken.
const MAX_FIELD: usize = 1600;

/// What an accepted event asks of us.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Trigger {
    Lifecycle {
        transition: Transition,
        instance: String,
        token: String,
        /// Into a warm pool from EC2, or out of one to die: the instance never joins the cluster.
        warm_pool: bool,
    },
    TestNotification,
    Schedule,
}

/// Why an event was refused: the field, its value (shortened and escaped for the log), the rule.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Rejection {
    pub field: &'static str,
    pub value: String,
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.field, self.value, self.reason)
    }
}

/// The names an event must carry to be ours.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    pub group: &'a str,
    pub hooks: [&'a str; 2],
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct LifecycleDetail {
    lifecycle_action_token: Option<String>,
    auto_scaling_group_name: Option<String>,
    lifecycle_hook_name: Option<String>,
    #[serde(rename = "EC2InstanceId")]
    ec2_instance_id: Option<String>,
    lifecycle_transition: Option<String>,
    event: Option<String>,
    origin: Option<String>,
    destination: Option<String>,
}

fn reject(field: &'static str, value: &str, reason: impl Into<String>) -> Rejection {
    Rejection {
        field,
        value: shown(value),
        reason: reason.into(),
    }
}

/// Values are logged escaped and cut short, so a hostile string cannot forge log lines or flood them.
pub fn shown(value: &str) -> String {
    let cut: String = value.chars().take(80).collect();
    let more = if cut.len() < value.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

/// For raw bytes (a replayed file): malformed JSON is a rejection like any other.
pub fn parse_bytes(bytes: &[u8], expected: &Expected<'_>) -> Result<Trigger, Rejection> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        reject(
            "event",
            &String::from_utf8_lossy(bytes),
            format!("is not JSON: {e}"),
        )
    })?;
    parse(&value, expected)
}

pub fn parse(payload: &Value, expected: &Expected<'_>) -> Result<Trigger, Rejection> {
    let envelope = EventBridgeEvent::<Value>::deserialize(payload).map_err(|e| {
        reject(
            "event",
            &payload.to_string(),
            format!("is not an EventBridge event: {e}"),
        )
    })?;
    match (envelope.source.as_str(), envelope.detail_type.as_str()) {
        ("aws.events", "Scheduled Event") => Ok(Trigger::Schedule),
        ("aws.autoscaling", dt @ (LAUNCH_DETAIL | TERMINATE_DETAIL)) => {
            let transition = if dt == LAUNCH_DETAIL {
                Transition::Launch
            } else {
                Transition::Terminate
            };
            lifecycle(envelope.detail, transition, expected)
        }
        ("aws.autoscaling" | "aws.events", dt) => Err(reject(
            "detail-type",
            dt,
            "is not a lifecycle action or scheduled event",
        )),
        (source, _) => Err(reject(
            "source",
            source,
            "is neither aws.autoscaling nor aws.events",
        )),
    }
}

fn lifecycle(
    detail: Value,
    transition: Transition,
    expected: &Expected<'_>,
) -> Result<Trigger, Rejection> {
    let d = LifecycleDetail::deserialize(&detail).map_err(|e| {
        let text = detail.to_string();
        reject("detail", &text, format!("is not a lifecycle detail: {e}"))
    })?;
    let fields = [
        ("LifecycleActionToken", &d.lifecycle_action_token),
        ("AutoScalingGroupName", &d.auto_scaling_group_name),
        ("LifecycleHookName", &d.lifecycle_hook_name),
        ("EC2InstanceId", &d.ec2_instance_id),
        ("LifecycleTransition", &d.lifecycle_transition),
        ("Event", &d.event),
        ("Origin", &d.origin),
        ("Destination", &d.destination),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            if v.len() > MAX_FIELD {
                return Err(reject(name, v, format!("is longer than {MAX_FIELD} bytes")));
            }
        }
    }
    // AWS sends this when a hook is created; it announces nothing to act on.
    if d.event.as_deref() == Some(TEST_NOTIFICATION)
        || d.lifecycle_transition.as_deref() == Some(TEST_NOTIFICATION)
    {
        return Ok(Trigger::TestNotification);
    }
    ours(&d, transition, expected)?;
    let Some(instance) = d.ec2_instance_id else {
        return Err(reject("EC2InstanceId", "", "is missing"));
    };
    if !is_instance_id(&instance) {
        return Err(reject(
            "EC2InstanceId",
            &instance,
            "is not an instance id ('i-' and 8 or 17 hex digits)",
        ));
    }
    let token = action_token(d.lifecycle_action_token)?;
    // A launch bound for the warm pool, or a termination out of it: not a member's arrival or
    // departure. (Leaving the group *for* the pool is a departure: its etcd stops.)
    let warm_pool = match transition {
        Transition::Launch => {
            d.destination.as_deref() == Some("WarmPool") && d.origin.as_deref() != Some("WarmPool")
        }
        Transition::Terminate => d.origin.as_deref() == Some("WarmPool"),
    };
    Ok(Trigger::Lifecycle {
        transition,
        instance,
        token,
        warm_pool,
    })
}

/// The event is for this function's group and one of its hooks, and its transition is the one
/// its detail-type names.
fn ours(
    d: &LifecycleDetail,
    transition: Transition,
    expected: &Expected<'_>,
) -> Result<(), Rejection> {
    let group = d.auto_scaling_group_name.as_deref().unwrap_or_default();
    if group != expected.group {
        return Err(reject(
            "AutoScalingGroupName",
            group,
            format!("is not this function's group {:?}", expected.group),
        ));
    }
    let hook = d.lifecycle_hook_name.as_deref().unwrap_or_default();
    if !expected.hooks.contains(&hook) {
        return Err(reject(
            "LifecycleHookName",
            hook,
            format!("is not one of this function's hooks {:?}", expected.hooks),
        ));
    }
    let want = match transition {
        Transition::Launch => "autoscaling:EC2_INSTANCE_LAUNCHING",
        Transition::Terminate => "autoscaling:EC2_INSTANCE_TERMINATING",
    };
    let got = d.lifecycle_transition.as_deref().unwrap_or_default();
    if got != want {
        return Err(reject(
            "LifecycleTransition",
            got,
            format!("does not match the detail-type (expected {want})"),
        ));
    }
    Ok(())
}

fn action_token(token: Option<String>) -> Result<String, Rejection> {
    let Some(token) = token else {
        return Err(reject("LifecycleActionToken", "", "is missing"));
    };
    if token.is_empty()
        || token.len() > 64
        || !token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(reject(
            "LifecycleActionToken",
            &token,
            "is not a lifecycle action token (1-64 letters, digits, '-')",
        ));
    }
    Ok(token)
}

pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17)
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

#[cfg(test)]
mod tests;
