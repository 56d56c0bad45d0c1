//! Everything under the parameter prefix: the record, the member configs, the fences and marks,
//! and what a step of ours wrote there, taken as written without listing it again.

use std::collections::{BTreeMap, BTreeSet};

use super::basics::Timestamp;
use super::member_config::MemberConfig;
use super::record::{ClusterRecord, Decision};

/// A member config as found in the parameter store, with when it was written.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Published {
    pub config: MemberConfig,
    pub published_at: Timestamp,
}

/// Everything under the parameter prefix.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PublishedState {
    pub cluster: Option<ClusterRecord>,
    /// Keyed by instance id.
    pub members: BTreeMap<String, Published>,
    /// When the function first saw each in-service instance's etcd not answering, by instance id.
    pub down_since: BTreeMap<String, Timestamp>,
    /// When the function marked each instance Unhealthy (`<prefix>/marked/<id>`), by instance id.
    pub marked: BTreeMap<String, Timestamp>,
    /// When each instance's member certificate ends (TLS=managed), by instance id.
    pub cert_not_after: BTreeMap<String, Timestamp>,
    /// Instances whose certificate's end says `issuing`: a hand-out began (and may have written
    /// the bundle) and did not end. Handed out again, or cleaned up with the instance.
    pub issuing: BTreeSet<String>,
    /// An operator's request to restore (RECOVERY=manual): a backup key, or `latest`.
    pub restore_request: Option<String>,
    /// When the request was last written (SSM's LastModifiedDate): it is for the loss of the
    /// generation it postdates, never a later one (`recovery::choose`).
    pub restore_request_at: Option<Timestamp>,
    /// The decisions about record generations, by the generation's fence (`<prefix>/decided/`).
    pub decided: BTreeMap<String, Decision>,
    /// The generations that replace lost ones, by the lost one's fence (`<prefix>/restored/`).
    pub restored: BTreeMap<String, ClusterRecord>,
}

/// What a step of ours wrote under the prefix, as a listing would read it back: the function is
/// the prefix's only writer (one invocation at a time), so an invocation that wrote it need not
/// list it again.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Written {
    Config {
        instance: String,
        config: MemberConfig,
        /// Its certificate's end, when one was issued with it.
        cert_not_after: Option<Timestamp>,
    },
    /// The config, and with `key_material` the instance's bundle and certificate end.
    Unpublished {
        instance: String,
        key_material: bool,
    },
    DownSince {
        instance: String,
        since: Timestamp,
    },
    DownForgotten {
        instance: String,
    },
    /// The cluster record, as written (not when another invocation's won).
    Record(ClusterRecord),
}

impl PublishedState {
    /// Whether `record`'s generation served: its own word, or its fence's. The fence is written
    /// first (`PublishedConfig::mark_served`): a crash or a lost answer between the two leaves a
    /// record that still says `bootstrapping` of a cluster that served, which must never be
    /// bootstrapped again.
    pub fn served(&self, record: &ClusterRecord) -> bool {
        record.has_served() || self.decided.get(&record.fence()) == Some(&Decision::Served)
    }

    /// The record that replaces `record` because its seed never served, if that is decided.
    pub fn replacement(&self, record: &ClusterRecord) -> Option<&ClusterRecord> {
        match self.decided.get(&record.fence()) {
            Some(Decision::Replaced(new)) => Some(new.as_ref()),
            _ => None,
        }
    }

    /// The state after `written`, at `now` (SSM's LastModifiedDate, to within the clocks).
    pub fn record(&mut self, written: Written, now: Timestamp) {
        match written {
            Written::Config {
                instance,
                config,
                cert_not_after,
            } => {
                if let Some(end) = cert_not_after {
                    self.cert_not_after.insert(instance.clone(), end);
                    self.issuing.remove(&instance);
                }
                let published_at = now;
                self.members.insert(
                    instance,
                    Published {
                        config,
                        published_at,
                    },
                );
            }
            Written::Unpublished {
                instance,
                key_material,
            } => {
                self.members.remove(&instance);
                if key_material {
                    self.cert_not_after.remove(&instance);
                    self.issuing.remove(&instance);
                }
            }
            Written::DownSince { instance, since } => {
                self.down_since.insert(instance, since);
            }
            Written::DownForgotten { instance } => {
                self.down_since.remove(&instance);
                self.marked.remove(&instance);
            }
            Written::Record(record) => {
                if record.has_served() {
                    self.decided.insert(record.fence(), Decision::Served);
                }
                self.cluster = Some(record)
            }
        }
    }
}
