//! The backup path on real components: a real etcd's snapshot streamed through the JSON gateway
//! into moto's S3, listed, handed over, and restored with etcd's own tool into a fresh member
//! that serves the same keys; a corrupted object is refused by the restore.

mod support;

use std::process::Command;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_autoscaling::config::Credentials;
use etcd_asg_lifecycle::adapters::etcd::EtcdMembers;
use etcd_asg_lifecycle::adapters::s3::S3Backups;
use etcd_asg_lifecycle::adapters::s3_client;
use etcd_asg_lifecycle::model::SnapshotFacts;
use etcd_asg_lifecycle::ports::{Backups, Members};
use serde_json::json;
use sha2::{Digest, Sha256};

async fn put(client: &reqwest::Client, url: &str, key: &str, value: &str) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    call(
        client,
        url,
        "/v3/kv/put",
        json!({"key": b64(key), "value": b64(value)}),
    )
    .await;
}

async fn count(client: &reqwest::Client, url: &str, prefix: &str) -> u64 {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let end = format!("{}{}", &prefix[..prefix.len() - 1], '0');
    let Ok(r) = client
        .post(format!("{url}/v3/kv/range"))
        .json(&json!({"key": b64(prefix), "range_end": b64(&end), "count_only": true}))
        .send()
        .await
    else {
        return 0;
    };
    let r: serde_json::Value = r.json().await.unwrap_or_default();
    r["count"].as_str().map_or(0, |c| c.parse().unwrap_or(0))
}

/// `etcdutl snapshot restore` beside the etcd under test (3.5), else `etcdctl` (3.4).
fn restore(
    snapshot: &std::path::Path,
    data_dir: &std::path::Path,
    peer: &str,
) -> std::process::Output {
    let etcd = support::etcd_bin();
    let dir = std::path::Path::new(&etcd)
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    let etcdutl = dir.join("etcdutl");
    let mut cmd = if etcdutl.exists() {
        Command::new(etcdutl)
    } else {
        let ctl = dir.join("etcdctl");
        let mut c = Command::new(if ctl.exists() { ctl } else { "etcdctl".into() });
        c.env("ETCDCTL_API", "3");
        c
    };
    cmd.args(["snapshot", "restore", snapshot.to_str().unwrap()])
        .args(["--name", "restored"])
        .args(["--initial-cluster", &format!("restored={peer}")])
        .args(["--initial-cluster-token", "restored"])
        .args(["--initial-advertise-peer-urls", peer])
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .output()
        .unwrap()
}

/// moto's S3 with a `backups` bucket, and the store on it, with the function's own
/// configuration (its timeouts and retries).
async fn bucket(moto: &support::Moto) -> (aws_sdk_s3::Client, S3Backups) {
    let loader = aws_config::defaults(BehaviorVersion::latest());
    let sdk =
        etcd_asg_lifecycle::adapters::bounded(loader, etcd_asg_lifecycle::adapters::FUNCTION_APP)
            .endpoint_url(&moto.endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
            .load()
            .await;
    let s3 = s3_client(&sdk);
    s3.create_bucket().bucket("backups").send().await.unwrap();
    let store = S3Backups {
        s3: s3.clone(),
        bucket: "backups".into(),
        prefix: "etcd-asg-lifecycle/test".into(),
    };
    (s3, store)
}

/// A member of a cluster of one, answering.
async fn etcd_serving(name: &str, root: &std::path::Path) -> support::Etcd {
    let mut etcd = support::Etcd::new(name, root);
    etcd.start(&format!("{name}={}", etcd.peer_url), "new");
    let url = etcd.client_url.clone();
    support::wait_until("etcd", Duration::from_secs(30), || {
        std::net::TcpStream::connect(url.trim_start_matches("http://")).ok()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    etcd
}

/// A JSON gateway call's answer.
async fn call(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let r = client
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {r:?}");
    r.json().await.unwrap()
}

/// The member's revision now.
async fn revision(client: &reqwest::Client, url: &str) -> i64 {
    let r = call(client, url, "/v3/maintenance/status", json!({})).await;
    r["header"]["revision"].as_str().unwrap().parse().unwrap()
}

const KEYS: u64 = 700;

#[tokio::test]
async fn a_snapshot_streams_into_s3_and_restores_into_a_member_serving_the_same_keys() {
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let (s3, store) = bucket(&moto).await;
    let mut etcd = etcd_serving("n1", dir.path()).await;
    let client = reqwest::Client::new();
    let url = etcd.client_url.clone();
    // ~21 MiB of keys: many gateway chunks, three upload parts of 8 MiB, each filling the
    // space of the one before it (the checksum and the restore below prove none was overwritten).
    let blob = "v".repeat(30_000);
    for n in 0..KEYS {
        put(&client, &url, &format!("/keys/{n:03}"), &blob).await;
    }

    let members = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    let snapshot = members.snapshot(&url).await.unwrap();
    let facts = SnapshotFacts {
        token: "test-token".into(),
        // As read before it streamed, with nothing written since: what the snapshot holds (the
        // manifest's), and what its key names and the listing says.
        revision: KEYS as i64 + 1,
        cluster_id: 7,
        member: "n1".into(),
        etcd_version: "3.x".into(),
        cluster_version: None,
        taken_at: 1_800_000_000,
    };
    let (backup, sha256) = store.store(snapshot, &facts).await.unwrap();
    assert!(
        backup
            .key
            .starts_with("etcd-asg-lifecycle/test/test-token/"),
        "{}",
        backup.key
    );
    assert!(backup.size > 2 * (8 << 20), "{}", backup.size);
    assert_eq!(store.list().await.unwrap().complete, vec![backup.clone()]);

    // A stream corrupted on the way fails etcd's own trailing SHA-256: refused before it is
    // stored, the upload aborted, nothing listed.
    struct Flipped(etcd_asg_lifecycle::ports::Snapshot, usize);
    impl etcd_asg_lifecycle::ports::SnapshotStream for Flipped {
        fn next_chunk(&mut self) -> etcd_asg_lifecycle::ports::NextChunk<'_> {
            Box::pin(async move {
                let mut chunk = self.0.next_chunk().await?;
                self.1 += 1;
                if let Some(c) = chunk.as_mut().filter(|_| self.1 == 2) {
                    c[0] ^= 0xff;
                }
                Ok(chunk)
            })
        }
    }
    let corrupted = Box::new(Flipped(members.snapshot(&url).await.unwrap(), 0));
    let later = SnapshotFacts {
        taken_at: facts.taken_at + 60,
        ..facts.clone()
    };
    let e = store.store(corrupted, &later).await.unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");
    assert_eq!(store.list().await.unwrap().complete, vec![backup.clone()]);
    let uploads = s3
        .list_multipart_uploads()
        .bucket("backups")
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty(), "{uploads:?}");

    // A 3.6 member's snapshot of a cluster still at 3.5 holds 3.5's storage: its key says so,
    // and the listing tells a restorer it needs 3.5 (`versions::storage_of`), not 3.6.
    let mixed = SnapshotFacts {
        taken_at: facts.taken_at + 90,
        etcd_version: "3.6.17".into(),
        cluster_version: Some("3.5.0".parse().unwrap()),
        ..facts.clone()
    };
    let (stored, _) = store
        .store(members.snapshot(&url).await.unwrap(), &mixed)
        .await
        .unwrap();
    assert!(stored.key.ends_with("-v3.6.17-s3.5.db"), "{}", stored.key);
    assert_eq!(stored.etcd_version, Some("3.5.0".parse().unwrap()));
    assert_eq!(
        store.list().await.unwrap().complete,
        vec![backup.clone(), stored.clone()]
    );
    store.delete(&stored.key).await.unwrap();

    // What the seed gets: the URL, the checksum, and read access by its tag.
    let handed = store
        .hand_over(
            &backup.key,
            "arn:aws:ec2:us-east-1:123456789012:instance/i-0000000000000000a",
        )
        .await
        .unwrap();
    let (handed, copied_from) = handed;
    assert_eq!(handed.sha256, sha256);
    assert_eq!(handed.url, format!("s3://backups/{}", backup.key));
    assert_eq!(copied_from, None);
    let tags = s3
        .get_object_tagging()
        .bucket("backups")
        .key(&backup.key)
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tag_set()[0].key(), "etcd-asg-instance-arn");
    assert!(tags.tag_set()[0]
        .value()
        .ends_with("instance/i-0000000000000000a"));

    // Download, check, restore with etcd's own tool, start a member on it: the same keys.
    let body = s3
        .get_object()
        .bucket("backups")
        .key(&backup.key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    let hex: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, sha256);
    let file = dir.path().join("snap.db");
    std::fs::write(&file, &body).unwrap();
    etcd.kill();
    let mut fresh = support::Etcd::new("restored", dir.path());
    let out = restore(&file, &fresh.dir, &fresh.peer_url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fresh.start(&format!("restored={}", fresh.peer_url), "new");
    let url = fresh.client_url.clone();
    let mut n = 0;
    for _ in 0..60 {
        let answer = tokio::time::timeout(Duration::from_secs(2), count(&client, &url, "/keys/"));
        if let Ok(found) = answer.await {
            n = found;
            if n > 0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(n, KEYS);

    // A corrupted copy is refused by the restore (etcd checks the snapshot's own hash).
    let mut bad = body.to_vec();
    let middle = bad.len() / 2;
    bad[middle] ^= 0xff;
    let corrupt = dir.path().join("corrupt.db");
    std::fs::write(&corrupt, &bad).unwrap();
    let out = restore(&corrupt, &dir.path().join("never"), "http://127.0.0.1:1");
    assert!(
        !out.status.success(),
        "a corrupted snapshot must not restore"
    );
    // (etcd's tool may leave a partial directory behind: the boot script restores beside the
    // data dir and moves it in only on success.)

    // Another stack's store (its own bucket and prefix) copies the backup in: the same bytes
    // under its prefix, the source named in the manifest and handed over with the snapshot.
    s3.create_bucket().bucket("side").send().await.unwrap();
    let side = S3Backups {
        s3: s3.clone(),
        bucket: "side".into(),
        prefix: "etcd-asg-lifecycle/side".into(),
    };
    let source = format!("s3://backups/{}", backup.key);
    let copy = side.import(&source).await.unwrap();
    let file = backup.key.rsplit('/').next().unwrap();
    assert_eq!(
        copy.key,
        format!("etcd-asg-lifecycle/side/test-token/{file}")
    );
    assert_eq!((copy.revision, copy.size), (backup.revision, backup.size));
    assert_eq!(side.list().await.unwrap().complete, vec![copy.clone()]);
    let (handed, copied_from) = side.hand_over(&copy.key, "arn:i-b").await.unwrap();
    assert_eq!(
        (handed.sha256, copied_from),
        (sha256.clone(), Some(source.clone()))
    );
    // Again: found there, nothing changes.
    assert_eq!(side.import(&source).await.unwrap(), copy);
    assert_eq!(side.list().await.unwrap().complete, vec![copy.clone()]);
    side.delete(&copy.key).await.unwrap();

    // Pruning deletes the manifest first: the backup is no longer listed.
    store.delete(&backup.key).await.unwrap();
    assert_eq!(store.list().await.unwrap().complete, vec![]);

    // S3 as it fails. The completion applied, its answer lost: the SDK's retry meets
    // NoSuchUpload, and the object of the upload's size is what tells it is done.
    let lose_once = |action: &str| serde_json::json!({"rules": [{"fault": "lose", "action": action, "count": 1}]});
    let mut etcd = support::Etcd::new("n2", dir.path());
    etcd.start(&format!("n2={}", etcd.peer_url), "new");
    let url = etcd.client_url.clone();
    support::wait_until("etcd", Duration::from_secs(30), || {
        std::net::TcpStream::connect(url.trim_start_matches("http://")).ok()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    put(&client, &url, "/k", "v").await;
    let at = |t: i64| SnapshotFacts {
        taken_at: facts.taken_at + t,
        ..facts.clone()
    };
    moto.faults(lose_once("CompleteMultipartUpload")).await;
    let snapshot = members.snapshot(&url).await.unwrap();
    let (stored, _) = store.store(snapshot, &at(120)).await.unwrap();
    assert_eq!(store.list().await.unwrap().complete, vec![stored.clone()]);
    // The manifest never written (refused, every attempt): a snapshot without it, listed apart.
    moto.faults(serde_json::json!({"rules": [{"fault": "refuse", "action": "PutObject"}]}))
        .await;
    let snapshot = members.snapshot(&url).await.unwrap();
    store.store(snapshot, &at(180)).await.unwrap_err();
    moto.faults(serde_json::json!({"rules": []})).await;
    let listed = store.list().await.unwrap();
    assert_eq!(listed.complete, vec![stored.clone()]);
    assert_eq!(listed.incomplete.len(), 1, "{listed:?}");
    let orphan = listed.incomplete[0].key.clone();
    assert!(orphan.ends_with(".db"), "{orphan}");
    // A prune cut short after the manifest: the snapshot alone, listed apart; pruned again, gone.
    s3.delete_object()
        .bucket("backups")
        .key(format!("{}.json", stored.key))
        .send()
        .await
        .unwrap();
    let listed = store.list().await.unwrap();
    assert!(listed.complete.is_empty(), "{listed:?}");
    assert_eq!(listed.incomplete.len(), 2, "{listed:?}");
    for half in listed.incomplete {
        store.delete(&half.key).await.unwrap();
    }
    assert_eq!(store.list().await.unwrap(), Default::default());
    let done = moto.faults_done().await;
    assert_eq!(done["s3.CompleteMultipartUpload.lose"], 1, "{done}");
}

/// Issue 38: a manifest said the revision read before its snapshot streamed, and a final
/// snapshot was taken again and again while leases expired. The manifest says the revision the
/// snapshot holds, read from its database on the way (`snapshot::SnapshotRevision`), which is
/// etcd's own on a restore: a tree of many pages with a value over several, and a store whose
/// newest revision, a deletion, a compaction took from its keys.
#[tokio::test]
async fn a_manifest_says_the_revision_its_snapshot_holds_not_the_one_read_before_it() {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let dir = tempfile::tempdir().unwrap();
    let moto = support::Moto::start(dir.path());
    let (_s3, store) = bucket(&moto).await;
    let etcd = etcd_serving("n3", dir.path()).await;
    let client = reqwest::Client::new();
    let url = etcd.client_url.clone();
    let members = EtcdMembers::new(Duration::from_secs(3), None).unwrap();
    for n in 0..600 {
        put(&client, &url, &format!("/many/{n:04}"), &"m".repeat(2_000)).await;
    }
    put(&client, &url, "/big", &"b".repeat(40_000)).await;
    let facts = SnapshotFacts {
        token: "test-token".into(),
        // Read before: a lease expired, or a client wrote, since.
        revision: 2,
        cluster_id: 7,
        member: "n3".into(),
        etcd_version: "3.x".into(),
        cluster_version: None,
        taken_at: 1_800_000_000,
    };
    let holds = revision(&client, &url).await;
    assert!(holds > 600, "{holds}");
    let (backup, _) = store
        .store(members.snapshot(&url).await.unwrap(), &facts)
        .await
        .unwrap();
    assert_eq!(backup.revision, holds);
    assert_eq!(store.holds(&backup.key).await.unwrap(), holds);
    // Its key keeps what was read before (chosen before the upload began): the listing's
    // revision is a lower bound until a manifest is read.
    assert!(backup.key.contains("-rev000000000002"), "{}", backup.key);

    // The newest revision a deletion, then compacted away: etcd restores at the compaction.
    call(
        &client,
        &url,
        "/v3/kv/deleterange",
        json!({"key": b64("/big")}),
    )
    .await;
    let deleted = revision(&client, &url).await;
    call(
        &client,
        &url,
        "/v3/kv/compaction",
        json!({"revision": deleted, "physical": true}),
    )
    .await;
    let later = SnapshotFacts {
        taken_at: facts.taken_at + 60,
        ..facts.clone()
    };
    let (compacted, _) = store
        .store(members.snapshot(&url).await.unwrap(), &later)
        .await
        .unwrap();
    assert_eq!((compacted.revision, deleted), (holds + 1, holds + 1));
    assert_eq!(store.holds(&compacted.key).await.unwrap(), deleted);
}
