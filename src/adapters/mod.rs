//! Thin adapters from the ports to etcd and AWS: translation only, no decisions.

pub mod autoscaling;
pub mod etcd;
pub mod ssm;

use crate::error::{BoxError, Error};

fn aws(operation: &'static str) -> impl FnOnce(BoxError) -> Error {
    move |source| Error::Aws { operation, source }
}
