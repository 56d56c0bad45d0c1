//! The fake's bucket: backups listed, stored (or half stored), deleted and handed over
//! (`Backups`).

use super::*;

fn store_failure(operation: &'static str) -> Error {
    Error::Aws {
        operation,
        source: "AccessDenied: the bucket's KMS key is disabled".into(),
    }
}

impl Backups for Fake {
    async fn list(&self) -> Result<BackupListing, Error> {
        if self.world().bucket_list_fails {
            return Err(store_failure("ListObjectsV2"));
        }
        let w = self.world();
        let mut complete: Vec<Backup> = w.bucket.values().map(|(b, _)| b.clone()).collect();
        complete.sort_by_key(|b| (b.taken_at, b.revision));
        let incomplete = w.incomplete.values().cloned().collect();
        Ok(BackupListing {
            complete,
            incomplete,
        })
    }

    async fn store(
        &self,
        mut snapshot: Snapshot,
        facts: &SnapshotFacts,
    ) -> Result<(Backup, String), Error> {
        if self.world().bucket_store_fails {
            self.world().calls.push("store failed".into());
            return Err(store_failure("PutObject"));
        }
        let mut content = Vec::new();
        loop {
            match snapshot.next_chunk().await {
                Ok(Some(chunk)) => content.extend(chunk),
                Ok(None) => break,
                Err(e) => {
                    // The real store aborts its multipart upload: nothing is kept.
                    self.world().calls.push("store aborted".into());
                    return Err(e);
                }
            }
        }
        let mut w = self.world();
        let key = format!(
            "backups/{}/{:011}-rev{}.db",
            facts.token, facts.taken_at, facts.revision
        );
        w.calls.push(format!("store {key}"));
        let holds = w.snapshot_holds.take().unwrap_or(0).max(facts.revision);
        w.holds.insert(key.clone(), holds);
        let backup = Backup {
            key: key.clone(),
            token: facts.token.clone(),
            taken_at: facts.taken_at,
            revision: facts.revision,
            size: content.len() as u64,
            etcd_version: None,
        };
        let content = String::from_utf8(content).unwrap();
        if w.faults.split.contains("store") {
            // The snapshot stored, its manifest not.
            w.incomplete.insert(key.clone(), backup.clone());
            return split(&mut w, "store").map(|_| unreachable!());
        }
        w.bucket.insert(key, (backup.clone(), content.clone()));
        // What the real store answers: the backup at the revision its snapshot holds.
        let stored = Backup {
            revision: holds,
            ..backup
        };
        Ok((stored, format!("sha-of-{content}")))
    }

    async fn delete(&self, key: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("delete {key}"));
        if let Some((b, _)) = w.bucket.remove(key) {
            if w.faults.split.contains("prune") {
                // The manifest deleted, the snapshot not.
                w.incomplete.insert(key.to_string(), b);
                return split(&mut w, "prune");
            }
        }
        w.incomplete.remove(key);
        Ok(())
    }

    async fn hand_over(
        &self,
        key: &str,
        instance_arn: &str,
    ) -> Result<(BackupRef, Option<String>), Error> {
        let mut w = self.world();
        w.calls
            .push(format!("hand-over {key} to {}", id_of(instance_arn)));
        let (_, content) = w
            .bucket
            .get(key)
            .ok_or_else(|| refused("hand over", Refusal::Other))?
            .clone();
        let snapshot = BackupRef {
            key: key.to_string(),
            url: format!("s3://bucket/{key}"),
            sha256: format!("sha-of-{content}"),
        };
        Ok((snapshot, w.copied_from.get(key).cloned()))
    }

    async fn holds(&self, key: &str) -> Result<i64, Error> {
        let w = self.world();
        let listed = w.bucket.get(key).map(|(b, _)| b.revision);
        w.holds
            .get(key)
            .copied()
            .or(listed)
            .ok_or_else(|| refused("read a manifest", Refusal::Other))
    }
}
