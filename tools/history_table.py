#!/usr/bin/env python3
"""docs/clients.md's table of what clients saw, from the checked histories the end-to-end tests
noted ($CACHE/histories/summaries.jsonl, sim/history.py `note`): the latest figures of each
event's test on each etcd version, as markdown rows.

    python3 tools/history_table.py [summaries.jsonl]
"""

import json
import os
import sys

# The event each test makes (what a watch saw comes from the figures).
EVENTS = [
    ("a member replaced (each, one at a time)", "test_certificates_renew_by_replacing_members_one_at_a_time"),
    ("the demo's steps: scale out, every member replaced, scale in, the leader terminated, a lost "
     "launch event, a member detached", "test_no_acknowledged_write_was_lost_and_the_cluster_id_never_changed"),
    ("a zone lost (two voters of five)", "test_a_zone_of_two_members_of_five_lost"),
    ("a member only clients cannot reach", "test_a_member_only_the_function_cannot_reach"),
    ("every member paused 12 s, then resumed", "test_a_partition_with_the_members_still_in_the_group"),
    ("every member lost: restore from a backup", "test_every_member_lost_at_once_comes_back_from_the_latest_backup"),
    ("a majority lost: restore from the survivor", "test_a_majority_lost_for_good_comes_back_from_the_survivors"),
    ("the upgrade chain 3.4 → 3.5 → 3.6 → 3.7", "test_a_cluster_born_on_3_4_rolls_to_3_7"),
]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.environ.get("ETCD_BUILDS", "/var/tmp/etcd-asg-lifecycle"), "histories", "summaries.jsonl")
    latest = {}
    with open(path) as f:
        for line in f:
            s = json.loads(line)
            latest[(s["test"].split("::")[-1], s["etcd"].rsplit(".", 1)[0])] = s
    print("| event | etcd | checked: operations (failed, unknown outcome), watch events | "
          "longest with no operation succeeding | slowest answered operation | restore: acknowledged writes lost | "
          "a watch |")
    print("|---|---|---|---|---|---|---|")
    for event, test in EVENTS:
        for (name, minor), s in sorted(latest.items()):
            if not name.startswith(test):
                continue
            where = (" (past the survivor's revision)" if "survivor" in event else
                     " (past the final snapshot)" if "hibernation" in event else " (past the backup)")
            cut = "; ".join(f"{r['lost_acknowledged_writes']}{where}" for r in s.get("restores") or []) or "—"
            # What the two watches did, as recorded: a session ends only when etcd cancels it.
            extra = s["watch_sessions"] - 2
            seen = (f"{s['watch_compacted']} of 2 told their revision was compacted, re-listed"
                    if s["watch_compacted"] else
                    f"{extra} cancelled and re-listed" if extra > 0 else
                    "resumed by clientv3, none cancelled; nothing missed, repeated or reordered")
            print(f"| {event} | {minor} | {s['ops']} ({s['failed']}, {s['unresolved_writes']}), {s['watch_events']} "
                  f"| {s['longest_without_success_ms'] / 1000:.1f} s | {s['longest_ok_op_ms'] / 1000:.1f} s | {cut} "
                  f"| {seen} |")


if __name__ == "__main__":
    main()
