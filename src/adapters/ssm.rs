//! The published cluster record and member configs, as SSM parameters under one prefix:
//! `<prefix>/cluster` (JSON) and `<prefix>/members/<instance-id>` (an etcd env file).

use aws_sdk_ssm::types::ParameterType;

use super::aws;
use crate::error::Error;
use crate::model::{ClusterRecord, MemberConfig, Published, PublishedState};
use crate::ports::{self, Created};

pub struct SsmParameters {
    pub ssm: aws_sdk_ssm::Client,
    pub prefix: String,
}

impl SsmParameters {
    pub fn cluster_name(&self) -> String {
        format!("{}/cluster", self.prefix)
    }

    pub fn member_name(&self, instance: &str) -> String {
        format!("{}/members/{instance}", self.prefix)
    }
}

impl ports::PublishedConfig for SsmParameters {
    async fn load(&self) -> Result<PublishedState, Error> {
        let mut state = PublishedState::default();
        let members_path = format!("{}/members/", self.prefix);
        let cluster_name = self.cluster_name();
        let mut pages = self
            .ssm
            .get_parameters_by_path()
            .path(&self.prefix)
            .recursive(true)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| aws("GetParametersByPath")(e.into()))?;
            for p in page.parameters() {
                let (Some(name), Some(value)) = (p.name(), p.value()) else {
                    continue;
                };
                if name == cluster_name {
                    let record = serde_json::from_str(value).map_err(|e| Error::BadParameter {
                        name: name.to_string(),
                        detail: e.to_string(),
                    })?;
                    state.cluster = Some(record);
                } else if let Some(instance) = name.strip_prefix(&members_path) {
                    match MemberConfig::parse_env(value) {
                        Ok(config) => {
                            let published_at = p.last_modified_date().map_or(0, |d| d.secs());
                            state.members.insert(
                                instance.to_string(),
                                Published {
                                    config,
                                    published_at,
                                },
                            );
                        }
                        // Treated as unpublished: the planner writes a good one over it.
                        Err(detail) => {
                            tracing::warn!(parameter = name, %detail, "unreadable member config")
                        }
                    }
                }
            }
        }
        Ok(state)
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let value = serde_json::to_string(record).expect("a record serializes");
        let r = self
            .ssm
            .put_parameter()
            .name(self.cluster_name())
            .value(value)
            .r#type(ParameterType::String)
            .overwrite(false)
            .send()
            .await;
        match r {
            Ok(_) => Ok(Created::Created),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_parameter_already_exists()) =>
            {
                Ok(Created::AlreadyExists)
            }
            Err(e) => Err(aws("PutParameter")(e.into())),
        }
    }

    async fn publish(&self, instance: &str, config: &MemberConfig) -> Result<(), Error> {
        self.ssm
            .put_parameter()
            .name(self.member_name(instance))
            .value(config.to_env())
            .r#type(ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .map_err(|e| aws("PutParameter")(e.into()))?;
        Ok(())
    }

    async fn unpublish(&self, instance: &str) -> Result<(), Error> {
        let r = self
            .ssm
            .delete_parameter()
            .name(self.member_name(instance))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_parameter_not_found()) =>
            {
                Ok(())
            }
            Err(e) => Err(aws("DeleteParameter")(e.into())),
        }
    }
}
