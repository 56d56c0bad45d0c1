//! Keeps an etcd cluster's membership in step with the EC2 Auto Scaling group it runs in.
//!
//! Every invocation observes the group, the published configs and the member list, asks the pure
//! [`planner`] for the next safe step and applies it, until nothing is left to do.

pub mod adapters;
pub mod cli;
pub mod config;
pub mod dry_run;
pub mod error;
pub mod event;
pub mod live;
pub mod metrics;
pub mod model;
pub mod pki;
pub mod planner;
pub mod ports;
pub mod reconciler;
pub mod snapshot;
pub mod versions;

#[cfg(test)]
mod fake;

pub use config::Config;
pub use error::Error;
pub use reconciler::{Reconciler, Response};
