use super::*;
use std::path::Path;

const EXPECTED: Expected<'static> = Expected {
    group: "my-asg",
    hooks: ["my-lifecycle-hook", "my-termination-hook"],
};

fn launch(instance: &str) -> Trigger {
    Trigger::Lifecycle {
        transition: Transition::Launch,
        instance: instance.into(),
        token: "87654321-4321-4321-4321-210987654321".into(),
        warm_pool: false,
    }
}

/// Every file in `events/` with the outcome it must have. A file without a row fails the test,
/// so a new fixture cannot go unchecked.
fn expectation(file: &str) -> Result<Trigger, &'static str> {
    Ok(match file {
        "launch.json" => launch("i-1234567890abcdef0"),
        "terminate.json" => Trigger::Lifecycle {
            transition: Transition::Terminate,
            instance: "i-1234567890abcdef0".into(),
            token: "87654321-4321-4321-4321-210987654321".into(),
            warm_pool: false,
        },
        "test-notification.json" => Trigger::TestNotification,
        "scheduled.json" => Trigger::Schedule,
        "rejected-foreign-group.json" => return Err("AutoScalingGroupName"),
        "rejected-hostile-group.json" => return Err("AutoScalingGroupName"),
        "rejected-foreign-hook.json" => return Err("LifecycleHookName"),
        "rejected-missing-token.json" => return Err("LifecycleActionToken"),
        "rejected-oversized-token.json" => return Err("LifecycleActionToken"),
        "rejected-missing-instance.json" => return Err("EC2InstanceId"),
        "rejected-bad-instance-id.json" => return Err("EC2InstanceId"),
        "rejected-number-instance-id.json" => return Err("detail"),
        "rejected-transition-mismatch.json" => return Err("LifecycleTransition"),
        "rejected-other-source.json" => return Err("source"),
        "rejected-missing-detail-type.json" => return Err("event"),
        "rejected-malformed.json" => return Err("event"),
        other => panic!("events/{other} has no expected outcome in this test"),
    })
}

#[test]
fn every_event_file_has_the_outcome_it_expects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("events");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let got = parse_bytes(&std::fs::read(&path).unwrap(), &EXPECTED);
        match (expectation(&name), got) {
            (Ok(want), Ok(got)) => assert_eq!(got, want, "{name}"),
            (Err(field), Err(r)) => {
                assert_eq!(r.field, field, "{name}: {r}");
                assert!(name.starts_with("rejected-"), "{name} is rejected: {r}");
            }
            (want, got) => panic!("{name}: expected {want:?}, got {got:?}"),
        }
        seen += 1;
    }
    assert!(
        seen >= 16,
        "only {seen} event files found in {}",
        dir.display()
    );
}

#[test]
fn hostile_values_are_escaped_and_shortened_for_the_log() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("events/rejected-hostile-group.json"),
    )
    .unwrap();
    let r = parse_bytes(&bytes, &EXPECTED).unwrap_err();
    assert!(
        !r.value.contains('\n') && !r.value.contains('\u{1b}'),
        "{}",
        r.value
    );
    assert!(r.value.contains("\\n"), "{}", r.value);
    let long = shown(&"x".repeat(5000));
    assert!(long.chars().count() < 100, "{long}");
}

#[test]
fn test_notification_is_recognized_under_either_field() {
    let mut e: Value = serde_json::from_str(include_str!("../../events/launch.json")).unwrap();
    e["detail"] = serde_json::json!({"Event": "autoscaling:TEST_NOTIFICATION"});
    assert_eq!(parse(&e, &EXPECTED), Ok(Trigger::TestNotification));
}

#[test]
fn instance_ids_are_i_and_eight_or_seventeen_hex_digits() {
    for ok in ["i-0123abcd", "i-1234567890abcdef0"] {
        assert!(is_instance_id(ok), "{ok}");
    }
    for bad in [
        "",
        "i-",
        "i-0123ABCD",
        "i-0123abc",
        "x-0123abcd",
        "i-0123abcd ",
        "i-1234567890abcdef",
    ] {
        assert!(!is_instance_id(bad), "{bad:?}");
    }
}

#[test]
fn a_terminate_hook_name_is_accepted_for_either_transition_but_foreign_ones_are_not() {
    let mut e: Value = serde_json::from_str(include_str!("../../events/launch.json")).unwrap();
    e["detail"]["LifecycleHookName"] = "my-termination-hook".into();
    assert_eq!(parse(&e, &EXPECTED), Ok(launch("i-1234567890abcdef0")));
    e["detail"]["LifecycleHookName"] = "".into();
    assert_eq!(parse(&e, &EXPECTED).unwrap_err().field, "LifecycleHookName");
}
