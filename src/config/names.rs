//! Who the function works for: the group and its hooks, the cluster's name and where its state
//! lives (the parameter prefix), where an instance's address comes from, and a running cluster
//! to adopt (ADOPT_ENDPOINTS).

use super::env::{bad, name_value, Env};
use super::vars::*;
use crate::error::Error;

/// The group, its hooks, and where the cluster's state lives.
pub(super) struct Names {
    pub(super) group_name: String,
    pub(super) launch_hook: String,
    pub(super) terminate_hook: String,
    pub(super) cluster_name: String,
    pub(super) parameter_prefix: String,
}

impl Names {
    pub(super) fn parse(env: &Env) -> Result<Self, Error> {
        let name = |var: &Var| name_value(var.name, env.required(var)?);
        let group_name = name(&ASG_NAME)?;
        let launch_hook = name(&LAUNCH_HOOK_NAME)?;
        let terminate_hook = name(&TERMINATE_HOOK_NAME)?;
        if launch_hook == terminate_hook {
            return Err(bad(
                TERMINATE_HOOK_NAME.name,
                &terminate_hook,
                "must differ from LAUNCH_HOOK_NAME: a group's hook names are unique",
            ));
        }
        let cluster_name = match env.get(&CLUSTER_NAME) {
            Some(v) => name_value(CLUSTER_NAME.name, v)?,
            None => group_name.clone(),
        };
        let parameter_prefix = env
            .get(&PARAMETER_PREFIX)
            .unwrap_or_else(|| format!("/etcd-asg-lifecycle/{cluster_name}"));
        let parameter_prefix = parameter_prefix.trim_end_matches('/').to_string();
        if !parameter_prefix.starts_with('/')
            || parameter_prefix.len() < 2
            || !parameter_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            return Err(bad(
                PARAMETER_PREFIX.name,
                &parameter_prefix,
                "must be an SSM path: '/' then letters, digits, '/', '_', '.', '-'",
            ));
        }
        Ok(Self {
            group_name,
            launch_hook,
            terminate_hook,
            cluster_name,
            parameter_prefix,
        })
    }
}

/// Where an instance's etcd address comes from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum AddressSource {
    PrivateIp,
    /// The value of this instance tag: for multi-ENI setups, and for tests that map instances to
    /// loopback addresses.
    Tag(String),
}

impl AddressSource {
    pub(super) fn parse(env: &Env) -> Result<Self, Error> {
        match env.get(&ADDRESS_SOURCE).as_deref() {
            None | Some("private-ip") => Ok(Self::PrivateIp),
            Some(v) => match v.strip_prefix("tag:") {
                Some(tag) if !tag.is_empty() => Ok(Self::Tag(tag.to_string())),
                _ => Err(bad(
                    ADDRESS_SOURCE.name,
                    v,
                    "must be 'private-ip' or 'tag:<tag key>'",
                )),
            },
        }
    }
}

/// ADOPT_ENDPOINTS: client URLs (`scheme://host:port`), at most nine, of one scheme: `https`
/// with TLS=managed (the adopted cluster's CA becomes the stack's: docs/adopting.md), `http`
/// without it (the members this stack adds speak what the old ones speak).
pub(super) fn adopt_endpoints(env: &Env, managed: bool) -> Result<Vec<String>, Error> {
    let Some(value) = env.get(&ADOPT_ENDPOINTS).filter(|v| !v.trim().is_empty()) else {
        return Ok(vec![]);
    };
    let urls: Vec<String> = value.split(',').map(|u| u.trim().to_string()).collect();
    let scheme = if managed { "https://" } else { "http://" };
    if let Some(u) = urls.iter().find(|u| !u.starts_with(scheme)) {
        let reason = if managed {
            "is not https: with TLS=managed the members this stack adds speak TLS, and so must \
             the cluster they join (adopt a plain-HTTP cluster with TLS=off)"
        } else {
            "is not http: a cluster with TLS is adopted with TLS=managed and its CA imported \
             (etcd-asg adopt-secrets)"
        };
        return Err(bad(ADOPT_ENDPOINTS.name, u, reason));
    }
    let well_formed = |u: &str| {
        u.strip_prefix(scheme)
            .and_then(|rest| rest.rsplit_once(':'))
            .is_some_and(|(host, port)| {
                !host.is_empty()
                    && host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b))
                    && port.parse::<u16>().is_ok_and(|p| p > 0)
            })
    };
    if let Some(u) = urls.iter().find(|u| !well_formed(u)) {
        return Err(bad(
            ADOPT_ENDPOINTS.name,
            u,
            "is not a client URL scheme://host:port",
        ));
    }
    if urls.len() > 9 {
        return Err(bad(
            ADOPT_ENDPOINTS.name,
            &value,
            "names more than nine endpoints",
        ));
    }
    Ok(urls)
}
