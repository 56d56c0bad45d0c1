//! `cleanup.rs` (rule 7): configs, key material and down-marks of instances that are gone or
//! well again.

use super::*;

#[test]
fn a_vanished_seeds_config_is_deleted_not_rewritten() {
    // The record served; the seed's config still says `new`, and the seed's instance is gone.
    let g = given(vec![inst(2, InService), inst(3, InService)])
        .record(1)
        .members(vec![voter(2), voter(3)])
        .published(1, seed_config(1), 1);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(1),
            key_material: false
        }
    );
    // Present, it is rewritten as before.
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .published(1, seed_config(1), 1);
    assert!(matches!(g.plan(), Step::Publish { instance, .. } if instance == i(1)));
}

#[test]
fn key_material_of_a_gone_instance_goes_even_without_its_config() {
    // An invocation handed out 9's bundle and died before publishing its config; 9 is gone.
    let mut g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cert_not_after.insert(i(9), 5000);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(9),
            // Its certificate end says there is key material (whatever TLS says now).
            key_material: true
        }
    );
    // An instance still present keeps it (its config is on its way).
    let mut g = given(vec![inst(1, InService), inst(2, PendingWait)])
        .record(1)
        .members(vec![voter(1)]);
    g.obs.published.cert_not_after.insert(i(2), 5000);
    assert_ne!(
        g.plan(),
        Step::Unpublish {
            instance: i(2),
            key_material: false
        }
    );
}

#[test]
fn configs_of_instances_that_are_gone_are_deleted() {
    let g = given(vec![inst(1, InService)])
        .record(1)
        .members(vec![voter(1)])
        .some_config(1)
        .some_config(9);
    assert_eq!(
        g.plan(),
        Step::Unpublish {
            instance: i(9),
            key_material: false
        }
    );
}

#[test]
fn a_down_mark_is_forgotten_once_the_member_answers_again() {
    let g = given(vec![inst(1, InService), inst(2, InService)])
        .record(1)
        .members(vec![voter(1), voter(2)])
        .down_since(2, 1);
    assert_eq!(g.plan(), Step::ForgetDown { instance: i(2) });
}

#[test]
fn a_down_mark_goes_before_any_other_step_once_the_member_answers() {
    // A learner is waiting to be promoted (a step every time), and 2 answers again: its mark is
    // forgotten first, so a later blip does not count from the first one.
    let g = given(vec![
        inst(1, InService),
        inst(2, InService),
        inst(3, PendingWait),
    ])
    .record(1)
    .members(vec![voter(1), voter(2), learner(3)])
    .down_since(2, 1);
    assert_eq!(g.plan(), Step::ForgetDown { instance: i(2) });
}
