//! Recovery (issue 8): a cluster every member of which is lost comes back from the latest
//! backup (or, RECOVERY=manual, the one an operator asks for, for that loss only); a partition
//! is no loss; a restoring seed that never starts hands over; a new stack starts from a copied
//! backup.

use super::*;

#[tokio::test]
async fn when_every_member_is_lost_the_cluster_comes_back_from_the_latest_backup() {
    let world = three_member_cluster().await;
    world.world().data = "precious".into();
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    let (old_token, old_id) = {
        let w = world.world();
        let rec = w.record.clone().unwrap();
        (rec.token, rec.cluster_id)
    };
    // Every instance gone at once, no hook; the data dies with them; the group launches anew.
    {
        let mut w = world.world();
        w.instances.clear();
        w.members.clear();
        w.data.clear();
    }
    for n in 4..=6 {
        world.launch(n);
    }
    converge_with(&r, &world).await;
    let w = world.world();
    assert_eq!(w.data, "precious", "restored");
    let rec = w.record.clone().unwrap();
    let restored = rec.restored_from.clone().expect("a restored generation");
    assert_eq!(restored.previous_token, old_token);
    assert_ne!(rec.token, old_token);
    assert_ne!(rec.cluster_id, old_id);
    assert!(rec.has_served());
    assert_eq!(w.members.len(), 3);
    assert!(w.calls.iter().any(|c| c.starts_with("hand-over")));
    // No config still asks for a restore: a wiped seed must not restore a second copy.
    assert!(w.configs.values().all(|p| p.config.restore.is_none()));
}

#[tokio::test]
async fn a_manual_restore_request_is_used_for_one_loss_never_the_next() {
    let world = three_member_cluster().await;
    world.world().data = "first".into();
    let manual = reconciler_with(
        &world,
        &[("BACKUP_BUCKET", "backups"), ("RECOVERY", "manual")],
    );
    manual.handle(&schedule(), far()).await.unwrap();
    let lose_everything = |first: u8| {
        {
            let mut w = world.world();
            w.instances.clear();
            w.members.clear();
            w.data.clear();
            w.now += 60;
        }
        for n in first..first + 3 {
            world.launch(n);
        }
    };
    lose_everything(4);
    world.world().now += 60;
    let (key, at) = (Some("latest".to_string()), Some(world.world().now));
    (
        world.world().restore_request,
        world.world().restore_request_at,
    ) = (key, at);
    converge_with(&manual, &world).await;
    assert_eq!(world.world().data, "first", "restored on request");
    let restored = world.world().record.clone().unwrap();
    // Weeks later, with newer data backed up, every member is lost again: the old request (still
    // there) is not for this loss.
    world.world().now += 21 * 86_400;
    world.world().data = "newer".into();
    manual.handle(&schedule(), far()).await.unwrap();
    lose_everything(7);
    let resp = manual.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("await-restore-request"),
        "{resp:?}"
    );
    assert_eq!(world.world().record, Some(restored));
}

#[tokio::test]
async fn a_partition_is_not_a_loss_and_manual_recovery_waits_for_the_operator() {
    let world = three_member_cluster().await;
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    // Unreachable but still in the group: never restored.
    world.world().etcd_down = true;
    world.launch(4);
    let before = world.world().record.clone();
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(world.world().record, before);
    assert!(!world.calls().iter().any(|c| c.starts_with("hand-over")));
    // Everything lost, RECOVERY=manual: nothing until a request.
    {
        let mut w = world.world();
        w.etcd_down = false;
        w.instances.retain(|i| i.id == "i-00000004");
        w.members.clear();
    }
    let manual = reconciler_with(
        &world,
        &[("BACKUP_BUCKET", "backups"), ("RECOVERY", "manual")],
    );
    let resp = manual.handle(&schedule(), far()).await.unwrap();
    let (_, waiting, _) = reconciled(&resp);
    assert!(
        waiting.unwrap().starts_with("await-restore-request"),
        "{resp:?}"
    );
    assert_eq!(world.world().record, before);
}

#[tokio::test]
async fn a_restore_whose_seed_never_starts_hands_the_snapshot_to_the_next_seed() {
    let world = three_member_cluster().await;
    world.world().data = "precious".into();
    let r = with_backups(&world);
    r.handle(&schedule(), far()).await.unwrap();
    {
        let mut w = world.world();
        w.instances.clear();
        w.members.clear();
        w.data.clear();
        // The restoring seed's etcd never starts (a bad AMI, a failed download).
        w.dead.insert("i-00000004".into());
    }
    for n in 4..=6 {
        world.launch(n);
    }
    r.handle(&schedule(), far()).await.unwrap();
    assert_eq!(
        world.world().record.as_ref().map(|r| r.seed.clone()),
        Some("i-00000004".into())
    );
    // Past the start timeout the seed is abandoned and another one restores.
    world.world().now += 10_000;
    for _ in 0..10 {
        r.handle(&schedule(), far()).await.unwrap();
        world.boot();
        world.world().now += 5;
    }
    let w = world.world();
    let seed = w.record.as_ref().unwrap().seed.clone();
    assert_ne!(seed, "i-00000004");
    assert!(
        w.calls
            .iter()
            .any(|c| c.starts_with("hand-over") && c.ends_with(&format!("to {seed}"))),
        "{:#?}",
        w.calls
    );
    assert_eq!(w.data, "precious", "restored by the second seed");
}

#[tokio::test]
async fn a_new_stack_asked_to_restore_a_copied_backup_starts_from_it_once_and_records_the_source() {
    let world = Fake::default();
    let key = "backups/prod-i-9/00000000500-rev42.db".to_string();
    let source =
        "s3://prod-backups/etcd-asg-lifecycle/prod/prod-i-9/20261201T000000Z-rev000000000042.db";
    {
        let mut w = world.world();
        let backup = crate::model::Backup {
            key: key.clone(),
            token: "prod-i-9".into(),
            taken_at: 500,
            revision: 42,
            size: 4,
            etcd_version: None,
        };
        w.bucket.insert(key.clone(), (backup, "prod".into()));
        w.copied_from.insert(key.clone(), source.into());
        w.restore_request = Some(key.clone());
        w.restore_request_at = Some(w.now);
    }
    for n in 1..=3 {
        world.launch(n);
    }
    // START_FROM=backup, RECOVERY manual, and no loss ever happened: the request alone decides.
    let r = reconciler_with(
        &world,
        &[
            ("BACKUP_BUCKET", "backups"),
            ("RECOVERY", "manual"),
            ("START_FROM", "backup"),
        ],
    );
    converge_with(&r, &world).await;
    let w = world.world();
    assert_eq!(w.data, "prod", "started from the copied backup");
    assert_eq!(w.clusters_formed, 1);
    assert_eq!(w.members.len(), 3);
    let rec = w.record.clone().unwrap();
    assert!(rec.has_served());
    let from = rec.restored_from.expect("restored");
    assert_eq!(
        (from.snapshot.key.as_str(), from.previous_token.as_str()),
        (key.as_str(), "prod-i-9")
    );
    assert_eq!(from.copied_from.as_deref(), Some(source));
    assert!(w.configs.values().all(|p| p.config.restore.is_none()));
    // No fence of a lost generation: there was none.
    assert!(w.restored.is_empty(), "{:?}", w.restored);
}
