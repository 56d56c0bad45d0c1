//! The published cluster record and member configs, as SSM parameters under one prefix:
//! `<prefix>/cluster` (JSON), `<prefix>/members/<instance-id>` (an etcd env file, tagged with the
//! instance's ARN so only that instance may read it), `<prefix>/down/<instance-id>` (when its
//! etcd was first seen down, epoch seconds) and `<prefix>/decided/<seed>-<created>` (the fence
//! of a record replaced because its seed never served).

use aws_sdk_ssm::types::{ParameterStringFilter, ParameterType, ResourceTypeForTagging, Tag};

use super::sdk::aws;
use crate::error::Error;
use crate::event::shown;
use crate::model::{ClusterRecord, Decision, MemberConfig, Published, PublishedState, Timestamp};
use crate::pki::{Ca, KeyPem, Password};
use crate::ports::{self, Created};

/// The tag on each member parameter that the instance policy compares with the requesting
/// instance's `ec2:SourceInstanceARN` (template.yaml).
pub const INSTANCE_ARN_TAG: &str = "etcd-asg-instance-arn";

/// The decision that a record generation served (see `decide`).
const SERVED: &str = "served";
/// A certificate's end while its hand-out is under way (see `hand_out`).
const ISSUING: &str = "issuing";

pub struct SsmParameters {
    pub ssm: aws_sdk_ssm::Client,
    pub prefix: String,
    /// The KMS key of SecureStrings; None: the account's `aws/ssm` key.
    pub kms_key_id: Option<String>,
}

impl SsmParameters {
    pub fn cluster_name(&self) -> String {
        format!("{}/cluster", self.prefix)
    }

    pub fn member_name(&self, instance: &str) -> String {
        format!("{}/members/{instance}", self.prefix)
    }

    pub fn down_name(&self, instance: &str) -> String {
        format!("{}/down/{instance}", self.prefix)
    }

    /// When the function marked the instance Unhealthy, epoch seconds.
    pub fn marked_name(&self, instance: &str) -> String {
        format!("{}/marked/{instance}", self.prefix)
    }

    fn decision_name(&self, record: &ClusterRecord) -> String {
        format!(
            "{}/decided/{}-{}",
            self.prefix, record.seed, record.created_at
        )
    }

    /// The one create-only decision about a record generation: `served`, or the record that
    /// replaced it. Whichever is written first holds forever; returns the one in force.
    async fn decide(&self, record: &ClusterRecord, decision: String) -> Result<String, Error> {
        let name = self.decision_name(record);
        match self.put(name.clone(), decision.clone(), false).await? {
            Created::Created => Ok(decision),
            Created::AlreadyExists => self.get(name.clone()).await?.ok_or(Error::BadParameter {
                name,
                detail: "exists and then does not: deleted by hand?".into(),
            }),
        }
    }

    async fn put(&self, name: String, value: String, overwrite: bool) -> Result<Created, Error> {
        self.put_typed(name, value, overwrite, ParameterType::String, None)
            .await
    }

    /// `for_instance`: a new parameter is created tagged with that instance ARN, so that it is
    /// never readable by anyone else, not even for a moment (fail closed). SSM takes tags only
    /// on creation: "You can't use Tags with Overwrite"
    /// (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html).
    async fn put_typed(
        &self,
        name: String,
        value: String,
        overwrite: bool,
        kind: ParameterType,
        for_instance: Option<&str>,
    ) -> Result<Created, Error> {
        let key_id = match kind {
            ParameterType::SecureString => self.kms_key_id.clone(),
            _ => None,
        };
        let tags = match for_instance.filter(|_| !overwrite) {
            Some(arn) => Some(vec![instance_tag(arn)?]),
            None => None,
        };
        let r = self
            .ssm
            .put_parameter()
            .name(name)
            .value(value)
            .r#type(kind)
            .set_key_id(key_id)
            .overwrite(overwrite)
            .set_tags(tags)
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

    async fn get(&self, name: String) -> Result<Option<String>, Error> {
        self.get_decrypted(name, false).await
    }

    async fn get_decrypted(&self, name: String, decrypt: bool) -> Result<Option<String>, Error> {
        let r = self
            .ssm
            .get_parameter()
            .name(name)
            .with_decryption(decrypt)
            .send()
            .await;
        match r {
            Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_string)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_parameter_not_found()) =>
            {
                Ok(None)
            }
            Err(e) => Err(aws("GetParameter")(e.into())),
        }
    }

    /// Tags an existing parameter with the instance's ARN: the instance policy lets only that
    /// instance read it. (Harmless when it is tagged already.)
    async fn tag_for(&self, instance_arn: &str, name: String) -> Result<(), Error> {
        self.ssm
            .add_tags_to_resource()
            .resource_type(ResourceTypeForTagging::Parameter)
            .resource_id(name)
            .tags(instance_tag(instance_arn)?)
            .send()
            .await
            .map_err(|e| aws("AddTagsToResource")(e.into()))?;
        Ok(())
    }

    pub fn ca_name(&self) -> String {
        format!("{}/pki/ca", self.prefix)
    }

    pub fn token_key_name(&self) -> String {
        format!("{}/pki/token-key", self.prefix)
    }

    /// An adopted cluster's `root` password: under `pki/`, which members' roles cannot read.
    pub fn root_password_name(&self) -> String {
        format!("{}/pki/adopted-root-password", self.prefix)
    }

    pub fn tls_name(&self, instance: &str) -> String {
        format!("{}/tls/{instance}", self.prefix)
    }

    /// When the instance's certificate ends, epoch seconds (plain: nothing secret).
    pub fn cert_name(&self, instance: &str) -> String {
        format!("{}/certs/{instance}", self.prefix)
    }

    /// One listed parameter into `state`, by where it is under the prefix. An unreadable
    /// down-mark, certificate end, decision or config is logged and left out (the planner writes
    /// a good one over it); an unreadable cluster record is an error.
    fn take(
        &self,
        state: &mut PublishedState,
        name: &str,
        value: &str,
        modified: Option<Timestamp>,
    ) -> Result<(), Error> {
        let under = |dir: &str| name.strip_prefix(&format!("{}/{dir}/", self.prefix));
        if name == self.cluster_name() {
            state.cluster = Some(Self::parse_record(name, value)?);
        } else if name == format!("{}/restore-request", self.prefix) {
            state.restore_request = Some(value.trim().to_string());
            state.restore_request_at = modified;
        } else if let Some(instance) = under("down") {
            match value.trim().parse() {
                Ok(since) => {
                    state.down_since.insert(instance.to_string(), since);
                }
                // Rewritten with the time it is next seen down.
                Err(_) => {
                    tracing::warn!(parameter = name, value = %shown(value), "unreadable down-mark")
                }
            }
        } else if let Some(instance) = under("marked") {
            match value.trim().parse() {
                Ok(at) => {
                    state.marked.insert(instance.to_string(), at);
                }
                Err(_) => {
                    tracing::warn!(parameter = name, value = %shown(value), "unreadable Unhealthy mark")
                }
            }
        } else if let Some(instance) = under("certs").filter(|_| value.trim() == ISSUING) {
            state.issuing.insert(instance.to_string());
        } else if let Some(instance) = under("certs") {
            match value.trim().parse() {
                Ok(end) => {
                    state.cert_not_after.insert(instance.to_string(), end);
                }
                Err(_) => {
                    tracing::warn!(parameter = name, value = %shown(value), "unreadable certificate end")
                }
            }
        } else if let Some(fence) = under("decided").or_else(|| under("restored")) {
            Self::take_fence(state, name, value, fence, under("decided").is_some());
        } else if let Some(instance) = under("members") {
            match MemberConfig::parse_env(value) {
                Ok(config) => {
                    let published_at = modified.unwrap_or(0);
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
        Ok(())
    }

    /// A fence: `decided/<fence>` (`served`, or the record that replaced the generation) or
    /// `restored/<fence>` (the record restored in its place). An unreadable one is logged and
    /// left out.
    fn take_fence(state: &mut PublishedState, name: &str, value: &str, fence: &str, decided: bool) {
        if decided {
            let decision = match value {
                SERVED => Ok(Decision::Served),
                record => Self::parse_record(name, record).map(|r| Decision::Replaced(Box::new(r))),
            };
            match decision {
                Ok(d) => {
                    state.decided.insert(fence.to_string(), d);
                }
                Err(e) => tracing::warn!(parameter = name, error = ?e, "unreadable decision"),
            }
        } else {
            match Self::parse_record(name, value) {
                Ok(record) => {
                    state.restored.insert(fence.to_string(), record);
                }
                Err(e) => tracing::warn!(parameter = name, error = ?e, "unreadable restore fence"),
            }
        }
    }

    fn parse_record(name: &str, value: &str) -> Result<ClusterRecord, Error> {
        serde_json::from_str(value).map_err(|e| Error::BadParameter {
            name: name.to_string(),
            detail: e.to_string(),
        })
    }
}

/// The tag an instance's parameters carry: its ARN, which the instance policy compares with the
/// requesting instance's `ec2:SourceInstanceARN` (template.yaml).
fn instance_tag(instance_arn: &str) -> Result<Tag, Error> {
    Tag::builder()
        .key(INSTANCE_ARN_TAG)
        .value(instance_arn)
        .build()
        .map_err(|e| aws("AddTagsToResource")(e.into()))
}

impl ports::PublishedConfig for SsmParameters {
    async fn load(&self) -> Result<PublishedState, Error> {
        let mut state = PublishedState::default();
        // Plain Strings only: the SecureStrings (bundles, the CA, the token key) are read where
        // they are needed, and left out the listing takes fewer pages of 10.
        let plain = ParameterStringFilter::builder()
            .key("Type")
            .option("Equals")
            .values("String")
            .build()
            .map_err(|e| aws("GetParametersByPath")(e.into()))?;
        let mut pages = self
            .ssm
            .get_parameters_by_path()
            .path(&self.prefix)
            .recursive(true)
            .parameter_filters(plain)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| aws("GetParametersByPath")(e.into()))?;
            for p in page.parameters() {
                let (Some(name), Some(value)) = (p.name(), p.value()) else {
                    continue;
                };
                self.take(
                    &mut state,
                    name,
                    value,
                    p.last_modified_date().map(|d| d.secs()),
                )?;
            }
        }
        Ok(state)
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let value = serde_json::to_string(record).expect("a record serializes");
        self.put(self.cluster_name(), value, false).await
    }

    /// Only if no decision was made about `old` yet (it served, or someone replaced it first).
    /// Whoever finds a replacement already decided rolls it forward if its writer died between
    /// the decision and the record.
    async fn replace_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let value = serde_json::to_string(new).expect("a record serializes");
        let decided = self.decide(old, value.clone()).await?;
        if decided == SERVED {
            return Ok(Created::AlreadyExists);
        }
        let current = match self.get(self.cluster_name()).await? {
            Some(v) => Some(Self::parse_record(&self.cluster_name(), &v)?),
            None => None,
        };
        if current.as_ref() != Some(old) {
            // Replaced already (by whoever decided), or changed since we looked.
            return Ok(Created::AlreadyExists);
        }
        Self::parse_record(&self.decision_name(old), &decided)?;
        let won = decided == value;
        self.put(self.cluster_name(), decided, true).await?;
        Ok(if won {
            Created::Created
        } else {
            Created::AlreadyExists
        })
    }

    async fn request_restore(&self, key: &str) -> Result<(), Error> {
        let name = format!("{}/restore-request", self.prefix);
        self.put(name, key.to_string(), true).await.map(drop)
    }

    /// The fence is `<prefix>/restored/<old seed>-<old created>`, create-only, holding the new
    /// record: one restore per lost generation, rolled forward by whoever finds it.
    async fn restore_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let fence = format!("{}/restored/{}-{}", self.prefix, old.seed, old.created_at);
        let value = serde_json::to_string(new).expect("a record serializes");
        let won = self.put(fence.clone(), value.clone(), false).await?;
        let decided = match won {
            Created::Created => value,
            Created::AlreadyExists => self.get(fence.clone()).await?.unwrap_or_default(),
        };
        let current = match self.get(self.cluster_name()).await? {
            Some(v) => Some(Self::parse_record(&self.cluster_name(), &v)?),
            None => None,
        };
        if current.as_ref() != Some(old) {
            return Ok(Created::AlreadyExists);
        }
        Self::parse_record(&fence, &decided)?;
        self.put(self.cluster_name(), decided, true).await?;
        Ok(won)
    }

    /// Only if the record was not replaced first: a served record is never replaced after.
    async fn mark_served(&self, record: &ClusterRecord) -> Result<Created, Error> {
        if self.decide(record, SERVED.into()).await? != SERVED {
            return Ok(Created::AlreadyExists);
        }
        let value = serde_json::to_string(record).expect("a record serializes");
        self.put(self.cluster_name(), value, true).await?;
        Ok(Created::Created)
    }

    /// Created tagged; rewritten (an unstarted member's config after the member list changed,
    /// the seed's once it served), then tagged again: a parameter of an older version that
    /// tagged after writing may lack its tag.
    async fn publish(
        &self,
        instance: &str,
        instance_arn: &str,
        config: &MemberConfig,
    ) -> Result<(), Error> {
        let name = self.member_name(instance);
        let kind = ParameterType::String;
        let value = config.to_env();
        let put = self.put_typed(
            name.clone(),
            value.clone(),
            false,
            kind.clone(),
            Some(instance_arn),
        );
        if put.await? == Created::AlreadyExists {
            self.put(name.clone(), value, true).await?;
            self.tag_for(instance_arn, name).await?;
        }
        Ok(())
    }

    async fn note_down(&self, instance: &str, since: Timestamp) -> Result<(), Error> {
        self.put(self.down_name(instance), since.to_string(), true)
            .await
            .map(drop)
    }

    async fn note_marked(&self, instance: &str, at: Timestamp) -> Result<(), Error> {
        self.put(self.marked_name(instance), at.to_string(), true)
            .await
            .map(drop)
    }

    /// One DeleteParameters for both (names already gone are not errors).
    async fn forget_down(&self, instance: &str) -> Result<(), Error> {
        let names = vec![self.down_name(instance), self.marked_name(instance)];
        self.ssm
            .delete_parameters()
            .set_names(Some(names))
            .send()
            .await
            .map_err(|e| aws("DeleteParameters")(e.into()))?;
        Ok(())
    }

    /// One DeleteParameters for all of them (names already gone are not errors).
    async fn unpublish(&self, instance: &str, key_material: bool) -> Result<(), Error> {
        let mut names = Vec::new();
        if key_material {
            names.push(self.tls_name(instance));
            names.push(self.cert_name(instance));
        }
        names.push(self.member_name(instance));
        names.push(self.marked_name(instance));
        self.ssm
            .delete_parameters()
            .set_names(Some(names))
            .send()
            .await
            .map_err(|e| aws("DeleteParameters")(e.into()))?;
        Ok(())
    }
}

/// `<prefix>/pki/ca` (the CA, JSON) and `<prefix>/tls/<instance-id>` (a member's PEM bundle,
/// tagged like its config): SecureStrings. Values are never logged; errors name the parameter.
impl ports::Secrets for SsmParameters {
    async fn load_ca(&self) -> Result<Option<Ca>, Error> {
        let name = self.ca_name();
        let Some(value) = self.get_decrypted(name.clone(), true).await? else {
            return Ok(None);
        };
        serde_json::from_str(&value)
            .map(Some)
            .map_err(|e| Error::BadParameter {
                name,
                // The position only: serde's message could quote the key.
                detail: format!("not a CA record (line {}, column {})", e.line(), e.column()),
            })
    }

    async fn create_ca(&self, ca: &Ca) -> Result<Created, Error> {
        let value = serde_json::to_string(ca).expect("a CA serializes");
        let kind = ParameterType::SecureString;
        self.put_typed(self.ca_name(), value, false, kind, None)
            .await
    }

    async fn load_token_key(&self) -> Result<Option<KeyPem>, Error> {
        let name = self.token_key_name();
        let value = self.get_decrypted(name.clone(), true).await?;
        match value {
            Some(v) if !v.contains("PRIVATE KEY-----") => Err(Error::BadParameter {
                name,
                detail: "not a PEM private key".into(),
            }),
            v => Ok(v.map(KeyPem::from)),
        }
    }

    async fn create_token_key(&self, key: &KeyPem) -> Result<Created, Error> {
        let value = key.expose().to_string();
        let kind = ParameterType::SecureString;
        self.put_typed(self.token_key_name(), value, false, kind, None)
            .await
    }

    async fn load_root_password(&self) -> Result<Option<Password>, Error> {
        let value = self.get_decrypted(self.root_password_name(), true).await?;
        Ok(value.map(Password::given))
    }

    async fn put_root_password(&self, password: &Password) -> Result<(), Error> {
        let value = password.expose().to_string();
        let kind = ParameterType::SecureString;
        self.put_typed(self.root_password_name(), value, true, kind, None)
            .await
            .map(drop)
    }

    /// Its end says `issuing` first, then the bundle is written, created tagged (fail closed, as
    /// configs), then its end: a hand-out cut short anywhere leaves `issuing`, which the planner
    /// hands out again, or cleans up with the instance (the listing holds plain Strings only:
    /// the marker is how a bundle without an end is found). A bundle found already there is
    /// from such a hand-out: no config was published after it, so no instance has read it, and
    /// it is overwritten (its tag stays: SSM keeps a parameter's tags when it is overwritten).
    async fn hand_out(
        &self,
        instance: &str,
        instance_arn: &str,
        bundle: &KeyPem,
        not_after: Timestamp,
    ) -> Result<(), Error> {
        self.put(self.cert_name(instance), ISSUING.into(), true)
            .await?;
        let name = self.tls_name(instance);
        let value = bundle.expose().to_string();
        let kind = ParameterType::SecureString;
        let put = self.put_typed(
            name.clone(),
            value.clone(),
            false,
            kind.clone(),
            Some(instance_arn),
        );
        if put.await? == Created::AlreadyExists {
            self.put_typed(name.clone(), value, true, kind, None)
                .await?;
            // A bundle of an older version, which tagged after writing, may lack its tag.
            self.tag_for(instance_arn, name).await?;
        }
        self.put(self.cert_name(instance), not_after.to_string(), true)
            .await?;
        Ok(())
    }
}
