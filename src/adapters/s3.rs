//! The backup store: etcd snapshots in S3, streamed in with a multipart upload (never whole in
//! memory), under `<prefix>/<cluster token>/<UTC time>-rev<revision>.db`, each followed by a
//! manifest `<key>.json` (`sha256`, `size`, `revision`, `cluster_id`, `member`, `etcd_version`,
//! `taken_at`). A snapshot without its manifest is incomplete: listed apart, never restored, and
//! pruned once old enough (as is a manifest whose snapshot a prune cut short already deleted).

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Tag, Tagging};

use super::sdk::aws;
use super::ssm::INSTANCE_ARN_TAG;
use crate::error::Error;
use crate::model::SnapshotFacts;
use crate::model::{Backup, BackupListing, BackupRef, Timestamp};
use crate::ports::{Backups, Snapshot};

/// Parts of the multipart upload: S3's minimum is 5 MiB (all but the last); one is held at once,
/// in a buffer that never grows past `PART` and one chunk of etcd's stream (32 KiB). The same
/// allocation serves every part: a part is split off and frozen for the SDK without a copy, and
/// `reserve` takes the space back once the SDK has dropped it
/// (<https://docs.rs/bytes/1/bytes/struct.BytesMut.html#method.reserve>). A fresh allocation
/// per part cost page faults, and glibc's sliding mmap threshold then kept a freed part on the
/// heap now and then: 25 or 33 MiB at peak (`make bench`).
const PART: usize = 8 << 20;
const PART_CAPACITY: usize = PART + (1 << 20);

pub struct S3Backups {
    pub s3: aws_sdk_s3::Client,
    pub bucket: String,
    /// Without leading or trailing '/'.
    pub prefix: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    sha256: String,
    size: u64,
    revision: i64,
    cluster_id: String,
    member: String,
    etcd_version: String,
    taken_at: Timestamp,
    /// A backup copied in from another stack's prefix or bucket (`etcd-asg restore --from`):
    /// the source, `s3://bucket/key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    copied_from: Option<String>,
}

/// `20261130T154927Z` from epoch seconds (UTC, proleptic Gregorian).
pub fn stamp(t: Timestamp) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The inverse of `stamp`.
pub fn parse_stamp(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(9..11)?, n(11..13)?, n(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// What a key's `<release>[-s<minor>]` says a restorer needs: the storage minor's `.0` where
/// named (`versions::storage_of`), else the release.
fn needs(version: &str) -> Option<crate::model::Version> {
    match version.split_once("-s") {
        Some((_, storage)) => format!("{storage}.0").parse().ok(),
        None => version.parse().ok(),
    }
}

impl S3Backups {
    fn key(&self, facts: &SnapshotFacts) -> String {
        // The version the member said it runs, when it is one, and the minor its storage holds
        // where the cluster version was older: what a restore needs to know without reading
        // the manifest (`versions::can_restore`, `versions::storage_of`).
        let version = facts
            .etcd_version
            .parse::<crate::model::Version>()
            .map(|v| {
                let storage = crate::versions::storage_of(v, facts.cluster_version);
                match storage == v {
                    true => format!("-v{v}"),
                    false => format!("-v{v}-s{}", storage.minor_str()),
                }
            })
            .unwrap_or_default();
        format!(
            "{}/{}/{}-rev{:012}{version}.db",
            self.prefix,
            facts.token,
            stamp(facts.taken_at),
            facts.revision
        )
    }

    /// `<prefix>/<token>/<stamp>-rev<revision>[-v<version>[-s<minor>]].db` → the backup, or None for
    /// anything else.
    fn parse_key(&self, key: &str, size: u64) -> Option<Backup> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let (token, file) = rest.split_once('/')?;
        let (stamp, revision) = file.strip_suffix(".db")?.split_once("-rev")?;
        let (revision, etcd_version) = match revision.split_once("-v") {
            Some((revision, version)) => (revision, Some(needs(version)?)),
            None => (revision, None),
        };
        Some(Backup {
            key: key.to_string(),
            token: token.to_string(),
            taken_at: parse_stamp(stamp)?,
            revision: revision.parse().ok()?,
            size,
            etcd_version,
        })
    }

    /// `expect`: the size and SHA-256 the stream must have (a copy's), checked before the
    /// upload completes: a mismatch never becomes an object.
    async fn upload(
        &self,
        key: &str,
        mut snapshot: Snapshot,
        expect: Option<(u64, &str)>,
    ) -> Result<Uploaded, Error> {
        let created = self
            .s3
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/octet-stream")
            .send()
            .await
            .map_err(|e| aws("CreateMultipartUpload")(e.into()))?;
        let upload_id = created.upload_id().unwrap_or_default().to_string();
        let result = self.parts(key, &upload_id, &mut snapshot, expect).await;
        if let Err(e) = &result {
            // Nothing half-done: an aborted upload leaves no object (and the bucket's lifecycle
            // rule sweeps any abort that fails).
            tracing::warn!(%key, error = ?e, "backup upload aborted: nothing stored");
            let _ = self
                .s3
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&upload_id)
                .send()
                .await;
        }
        result
    }

    async fn parts(
        &self,
        key: &str,
        upload_id: &str,
        snapshot: &mut Snapshot,
        expect: Option<(u64, &str)>,
    ) -> Result<Uploaded, Error> {
        let mut integrity = crate::snapshot::SnapshotIntegrity::default();
        let mut revision = crate::snapshot::SnapshotRevision::default();
        let mut sha256 = None;
        let mut size = 0u64;
        let mut parts = Vec::new();
        let mut buffer = bytes::BytesMut::with_capacity(PART_CAPACITY);
        while sha256.is_none() {
            match snapshot.next_chunk().await? {
                Some(chunk) => {
                    integrity.feed(&chunk);
                    revision.feed(&chunk);
                    size += chunk.len() as u64;
                    buffer.extend_from_slice(&chunk);
                }
                None => {
                    // Before the last part and the completion: a stream that fails etcd's own
                    // check never becomes an object (the caller aborts the upload).
                    let integrity = std::mem::take(&mut integrity);
                    sha256 = Some(checked(key, integrity, size, expect)?);
                }
            }
            let done = sha256.is_some();
            if buffer.len() >= PART || (done && (!buffer.is_empty() || parts.is_empty())) {
                let number = parts.len() as i32 + 1;
                // The part's bytes go with it; their space is taken back once it is sent.
                let body = buffer.split().freeze();
                let out = self
                    .s3
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(number)
                    .body(ByteStream::from(body))
                    .customize()
                    .disable_payload_signing()
                    .send()
                    .await
                    .map_err(|e| aws("UploadPart")(e.into()))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag().map(str::to_string))
                        .build(),
                );
                // Progress on long uploads: every 64 MiB.
                if number % 8 == 0 {
                    tracing::info!(%key, uploaded_mib = size >> 20, "backup upload progress");
                }
                if !done {
                    buffer.reserve(PART_CAPACITY);
                }
            }
        }
        self.complete(key, upload_id, parts, size).await?;
        Ok(Uploaded {
            size,
            sha256: hex(&sha256.unwrap_or_default()),
            holds: revision.revision(),
        })
    }
}

/// The SHA-256 of a whole stream of `size` bytes, if it passes etcd's trailer check and matches
/// `expect` (a copy's manifest); else the refusal, logged.
fn checked(
    key: &str,
    integrity: crate::snapshot::SnapshotIntegrity,
    size: u64,
    expect: Option<(u64, &str)>,
) -> Result<[u8; 32], Error> {
    let checked = integrity.verify().and_then(|sha| match expect {
        Some((want_size, want)) if (want_size, want) != (size, hex(&sha).as_str()) => Err(format!(
            "{size} bytes hashing to {}, its manifest says {want_size} bytes hashing to {want}",
            hex(&sha)
        )),
        _ => Ok(sha),
    });
    checked.map_err(|detail| {
        tracing::error!(%key, size, %detail, "snapshot refused: not stored");
        Error::EtcdProtocol {
            operation: "snapshot",
            detail,
        }
    })
}

/// A snapshot streamed into the bucket: its size, SHA-256 and the revision its database holds
/// (or why that could not be read).
struct Uploaded {
    size: u64,
    sha256: String,
    holds: Result<i64, String>,
}

impl S3Backups {
    /// CompleteMultipartUpload. An attempt that completed the upload and whose answer was lost
    /// leaves the SDK's retry "NoSuchUpload": the object is there, of this size, or it is not.
    async fn complete(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
        size: u64,
    ) -> Result<(), Error> {
        let completed = self
            .s3
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await;
        let Err(e) = completed else {
            return Ok(());
        };
        if e.code() == Some("NoSuchUpload") && self.stored(key, Some(size)).await? {
            tracing::info!(%key, "the upload was completed by an attempt whose answer was lost");
            return Ok(());
        }
        Err(aws("CompleteMultipartUpload")(e.into()))
    }

    /// Whether `key` is an object (of `size` bytes, when given) (HeadObject).
    async fn stored(&self, key: &str, size: Option<u64>) -> Result<bool, Error> {
        let head = self
            .s3
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match head {
            Ok(out) => Ok(size.is_none_or(|s| out.content_length() == Some(s as i64))),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) => Err(aws("HeadObject")(e.into())),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Backups for S3Backups {
    async fn list(&self) -> Result<BackupListing, Error> {
        let mut snapshots = Vec::new();
        let mut manifests = std::collections::BTreeSet::new();
        let mut pages = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(format!("{}/", self.prefix))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| aws("ListObjectsV2")(e.into()))?;
            for o in page.contents() {
                let Some(key) = o.key() else { continue };
                if let Some(snapshot) = key.strip_suffix(".json") {
                    manifests.insert(snapshot.to_string());
                } else if let Some(b) = self.parse_key(key, o.size().unwrap_or(0).max(0) as u64) {
                    snapshots.push(b);
                }
            }
        }
        let (mut complete, mut incomplete): (Vec<Backup>, Vec<Backup>) = snapshots
            .into_iter()
            .partition(|b| manifests.remove(&b.key));
        // Manifests whose snapshot is gone.
        incomplete.extend(manifests.iter().filter_map(|key| self.parse_key(key, 0)));
        complete.sort_by_key(|b| (b.taken_at, b.revision));
        incomplete.sort_by_key(|b| (b.taken_at, b.revision));
        Ok(BackupListing {
            complete,
            incomplete,
        })
    }

    async fn store(
        &self,
        snapshot: Snapshot,
        facts: &SnapshotFacts,
    ) -> Result<(Backup, String), Error> {
        let key = self.key(facts);
        let Uploaded {
            size,
            sha256,
            holds,
        } = self.upload(&key, snapshot, None).await?;
        // The key names the revision read before the stream (a lower bound: chosen before the
        // upload began); the manifest the one the snapshot holds, which the stream itself says.
        let revision = match holds {
            Ok(holds) if holds >= facts.revision => holds,
            Ok(holds) => {
                tracing::warn!(%key, holds, read_before = facts.revision,
                    "the snapshot's database says a revision below the one read before it: the manifest keeps the one read before");
                facts.revision
            }
            Err(why) => {
                tracing::warn!(%key, %why, read_before = facts.revision,
                    "the revision the snapshot holds could not be read from it: the manifest keeps the one read before");
                facts.revision
            }
        };
        let manifest = Manifest {
            sha256: sha256.clone(),
            size,
            revision,
            cluster_id: format!("{:x}", facts.cluster_id),
            member: facts.member.clone(),
            etcd_version: facts.etcd_version.clone(),
            taken_at: facts.taken_at,
            copied_from: None,
        };
        self.put_manifest(&key, &manifest).await?;
        let etcd_version = self.parse_key(&key, size).and_then(|b| b.etcd_version);
        let backup = Backup {
            key,
            token: facts.token.clone(),
            taken_at: facts.taken_at,
            revision,
            size,
            etcd_version,
        };
        Ok((backup, sha256))
    }

    /// The manifest first: from then on the snapshot is no longer listed.
    async fn delete(&self, key: &str) -> Result<(), Error> {
        for k in [format!("{key}.json"), key.to_string()] {
            self.s3
                .delete_object()
                .bucket(&self.bucket)
                .key(k)
                .send()
                .await
                .map_err(|e| aws("DeleteObject")(e.into()))?;
        }
        Ok(())
    }

    async fn hand_over(
        &self,
        key: &str,
        instance_arn: &str,
    ) -> Result<(BackupRef, Option<String>), Error> {
        let manifest = manifest(&self.s3, &self.bucket, key).await?;
        let tag = Tag::builder()
            .key(INSTANCE_ARN_TAG)
            .value(instance_arn)
            .build()
            .map_err(|e| aws("PutObjectTagging")(e.into()))?;
        self.s3
            .put_object_tagging()
            .bucket(&self.bucket)
            .key(key)
            .tagging(
                Tagging::builder()
                    .tag_set(tag)
                    .build()
                    .map_err(|e| aws("PutObjectTagging")(e.into()))?,
            )
            .send()
            .await
            .map_err(|e| aws("PutObjectTagging")(e.into()))?;
        let snapshot = BackupRef {
            key: key.to_string(),
            url: format!("s3://{}/{key}", self.bucket),
            sha256: manifest.sha256,
        };
        Ok((snapshot, manifest.copied_from))
    }

    async fn holds(&self, key: &str) -> Result<i64, Error> {
        Ok(manifest(&self.s3, &self.bucket, key).await?.revision)
    }
}

/// The manifest of the backup `key` in `bucket`.
async fn manifest(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Manifest, Error> {
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(format!("{key}.json"))
        .send()
        .await
        .map_err(|e| aws("GetObject")(e.into()))?;
    let bytes = out
        .body
        .collect()
        .await
        .map_err(|e| aws("GetObject")(e.into()))?
        .into_bytes();
    serde_json::from_slice(&bytes).map_err(|e| Error::BadParameter {
        name: format!("s3://{bucket}/{key}.json"),
        detail: e.to_string(),
    })
}

/// An S3 object's body as a snapshot stream (a backup being copied).
struct ObjectStream(ByteStream);

impl crate::ports::SnapshotStream for ObjectStream {
    fn next_chunk(&mut self) -> crate::ports::NextChunk<'_> {
        Box::pin(async move {
            match self.0.next().await {
                Some(Ok(bytes)) => Ok(Some(bytes.to_vec())),
                Some(Err(e)) => Err(aws("GetObject")(e.into())),
                None => Ok(None),
            }
        })
    }
}

/// `s3://bucket/key` → (bucket, key), or why not.
pub fn parse_s3_url(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("s3://").ok_or("must start with s3://")?;
    let (bucket, key) = rest
        .split_once('/')
        .ok_or("names no key after the bucket")?;
    // S3's bucket naming rules, loosely: lower-case letters, digits, dots and hyphens.
    // https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !bucket_ok {
        return Err(format!("{bucket:?} is not an S3 bucket name"));
    }
    if key.is_empty() || key.len() > 1024 {
        return Err("names no key, or one longer than S3 allows".into());
    }
    Ok((bucket.to_string(), key.to_string()))
}

impl S3Backups {
    /// `etcd-asg restore --from`: another stack's backup (`s3://bucket/<prefix>/<token>/<file>`,
    /// its snapshot; the manifest beside it) copied into this stack's prefix as
    /// `<prefix>/<token>/<file>`, with the caller's credentials (the function reads nothing
    /// outside its own prefix). The bytes stream through (never whole in memory), are checked as
    /// any snapshot stored (etcd's SHA-256 trailer) and must hash to the source manifest's
    /// `sha256`; the manifest is written last, naming the source (`copied_from`). Copying the
    /// same backup again finds it there and changes nothing; a different one under that key is
    /// refused.
    pub async fn import(&self, source: &str) -> Result<Backup, Error> {
        let refuse = |reason: String| Error::Config {
            var: "--from".into(),
            value: source.to_string(),
            reason,
        };
        let (bucket, key) = parse_s3_url(source).map_err(refuse)?;
        let mut segments = key.rsplit('/');
        let (file, token) = (segments.next().unwrap_or_default(), segments.next());
        let token = token.filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        });
        let target = token.map(|t| format!("{}/{t}/{file}", self.prefix));
        let Some((target, template)) = target.and_then(|t| self.parse_key(&t, 0).map(|b| (t, b)))
        else {
            return Err(refuse(
                "is not a backup's snapshot: <generation>/<time>-rev<revision>[-v<version>].db (see `etcd-asg backups` in the source stack)".into(),
            ));
        };
        let source_manifest = manifest(&self.s3, &bucket, &key).await.map_err(|e| {
            refuse(format!(
                "has no readable manifest beside it ({e}): not a complete backup"
            ))
        })?;
        if self.stored(&format!("{target}.json"), None).await? {
            let there = manifest(&self.s3, &self.bucket, &target).await?;
            if there.sha256 == source_manifest.sha256 {
                tracing::info!(%target, "already copied: nothing to do");
                return Ok(Backup {
                    size: there.size,
                    ..template
                });
            }
            return Err(refuse(format!(
                "s3://{}/{target} holds a different backup already",
                self.bucket
            )));
        }
        let object = self
            .s3
            .get_object()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| aws("GetObject")(e.into()))?;
        // Checked on the way: a copy that does not match is aborted, never stored.
        let expect = Some((source_manifest.size, source_manifest.sha256.as_str()));
        let Uploaded { size, .. } = self
            .upload(&target, Box::new(ObjectStream(object.body)), expect)
            .await
            .map_err(|e| refuse(format!("was not copied: {e:?}")))?;
        let copy = Manifest {
            copied_from: Some(source.to_string()),
            ..source_manifest
        };
        self.put_manifest(&target, &copy).await?;
        Ok(Backup { size, ..template })
    }

    /// The manifest of the backup `key`, written after its snapshot: from then on it is complete.
    async fn put_manifest(&self, key: &str, manifest: &Manifest) -> Result<(), Error> {
        let body = serde_json::to_vec(manifest).expect("a manifest serializes");
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(format!("{key}.json"))
            .content_type("application/json")
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| aws("PutObject")(e.into()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_sort_by_time_and_round_trip() {
        for t in [0, 1_796_053_175, 951_782_400, 4_102_444_799, 1_709_164_800] {
            assert_eq!(parse_stamp(&stamp(t)), Some(t), "{t} {}", stamp(t));
        }
        assert_eq!(stamp(1_796_053_175), "20261130T153935Z");
        assert_eq!(stamp(951_782_400), "20000229T000000Z");
        assert!(stamp(1_796_053_175) < stamp(1_796_053_176));
        for bad in [
            "",
            "20261330T000000Z",
            "2026113OT000000Z",
            "20261130 000000Z",
        ] {
            assert_eq!(parse_stamp(bad), None, "{bad}");
        }
    }
}
