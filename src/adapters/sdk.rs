//! What the AWS SDK's failures become: `Error::Aws`, naming the operation, its cause kept.

use crate::error::{BoxError, Error};

pub fn aws(operation: &'static str) -> impl FnOnce(BoxError) -> Error {
    move |source| Error::Aws { operation, source }
}
