"""Simulation's probes: what the cluster says of itself (members, leader, cluster version), what
is wrong with it against the group and the published parameters, waiting for it to converge,
and the tables an operator sees.
"""

from __future__ import annotations

import json
import time

from . import etcd


class NotConverged(AssertionError):
    pass


class ClusterProbes:
    """Looks at a Simulation's cluster through its running members (sim/instances.py), the group
    and parameters (sim/aws_side.py), the bucket, and the CLI (sim/world.py)."""

    def member_list(self) -> tuple[int, list[dict]] | None:
        # A second pass with more patience: on a loaded machine (end-to-end tests side by side)
        # one second can pass before a member answers, which is not a problem of the cluster.
        for timeout in (1.0, 3.0):
            for url in self.running_client_urls():
                try:
                    cid, members = etcd.members(url, timeout=timeout)
                    if any(m.get("isLearner") and url in m.get("clientURLs", []) for m in members):
                        continue
                    return cid, members
                except etcd.EtcdError:
                    continue
        return None

    def cluster_version(self) -> str | None:
        """The cluster version (``etcdcluster`` of ``GET /version``) the first running member that
        knows one reports."""
        for url in self.running_client_urls():
            try:
                found = etcd.versions(url).get("etcdcluster")
            except etcd.EtcdError:
                continue
            if found and found != "not_decided":
                return found
        return None

    def leader_id(self) -> int | None:
        """The leader's member id, as the first running member that knows one sees it."""
        for url in self.running_client_urls():
            try:
                lead = int(etcd.status(url).get("leader", 0))
            except etcd.EtcdError:
                continue
            if lead:
                return lead
        return None

    def leader(self) -> str | None:
        """The instance id of the current leader."""
        listed = self.member_list()
        lead = self.leader_id()
        names = {int(m["ID"]): m.get("name", "") for m in listed[1]} if listed else {}
        return names.get(lead) or None

    def problems(self, desired: int | None = None) -> list[str]:
        found = []
        group = self.describe_group()
        instances = group["Instances"]
        want = group["DesiredCapacity"] if desired is None else desired
        if len(instances) != want:
            found.append(f"group has {len(instances)} instances, desired {want}")
        for i in instances:
            if i["LifecycleState"] != "InService":
                found.append(f"{i['InstanceId']} is {i['LifecycleState']}")
        listed = self.member_list()
        if listed is None:
            return found + ["no member answers"]
        cid, members = listed
        if self.cluster_id is None:
            self.cluster_id = cid
        elif cid != self.cluster_id:
            found.append(f"cluster id changed from {self.cluster_id:x} to {cid:x}")
        names = sorted(m.get("name", "") for m in members)
        ids = sorted(i["InstanceId"] for i in instances)
        if names != ids:
            found.append(f"members {names} != instances {ids}")
        for m in members:
            if m.get("isLearner"):
                found.append(f"learner {int(m['ID']):x} ({m.get('name') or 'unstarted'}) left")
        params = self.parameters()
        if f"{self.prefix}/cluster" not in params:
            found.append("no cluster record")
        configs = sorted(k.rsplit("/", 1)[1] for k in params if k.startswith(f"{self.prefix}/members/"))
        if configs != ids:
            found.append(f"published configs {configs} != instances {ids}")
        return found

    def wait_converged(self, desired: int | None = None, timeout: float = 120.0, label: str = "") -> float:
        """Wait until the member set equals the group's live instances and nothing is held."""
        began = time.monotonic()
        last_report = began
        while True:
            found = self.problems(desired)
            if not found:
                if self._history_pending:
                    self.start_history()
                return time.monotonic() - began
            now = time.monotonic()
            if now - began > timeout:
                raise NotConverged(f"{label}: not converged after {timeout:.0f}s: {found}\n{self.table()}")
            if self.verbose and now - last_report > 5:
                print(f"    … {label} {now - began:.0f}s: {found[0]}" + (f" (+{len(found) - 1})" if len(found) > 1 else ""),
                      flush=True)
                last_report = now
            time.sleep(0.3)

    def backups(self) -> list[dict]:
        """Complete backups in the bucket (their manifest written), oldest first, with the
        manifest's fields and the key."""
        if not self.backup_bucket:
            return []
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.backup_bucket):
            keys += [o["Key"] for o in page.get("Contents", [])]
        out = []
        for key in sorted(k for k in keys if k.endswith(".db") and f"{k}.json" in keys):
            manifest = self.manifest(key)
            if manifest is not None:  # else pruned between the listing and now
                out.append({**manifest, "key": key})
        return sorted(out, key=lambda b: (b["taken_at"], b["revision"]))

    def manifest(self, key: str) -> dict | None:
        """The manifest of the backup `key` in this stack's bucket; None once it is gone."""
        try:
            body = self.s3.get_object(Bucket=self.backup_bucket, Key=f"{key}.json")["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        return json.loads(body)

    def status_table(self) -> str:
        """What an operator sees: ``etcd-asg status``."""
        r = self.cli("status")
        return r.stdout if r.returncode == 0 else f"etcd-asg status failed: {r.stderr.strip()}"

    def table(self) -> str:
        listed = self.member_list()
        members = {}
        if listed:
            for m in listed[1]:
                for u in m.get("peerURLs", []):
                    members[u] = m
        lead = self.leader_id()
        rows = []
        for i in sorted(self.group_instances(), key=lambda i: i["InstanceId"]):
            iid = i["InstanceId"]
            addr = self.instances[iid].address if iid in self.instances else "-"
            m = members.get(f"{self.scheme}://{addr}:2380")
            if m is None:
                mid, role = "-", "-"
            else:
                mid = f"{int(m['ID']):x}"
                role = "learner" if m.get("isLearner") else ("leader" if int(m["ID"]) == lead else "voter")
            try:
                etcd.status(f"{self.scheme}://{addr}:2379", timeout=0.5)
                healthy = "yes"
            except etcd.EtcdError:
                healthy = "no"
            rows.append((iid, i["LifecycleState"], addr, mid, role, healthy))
        head = ("instance", "lifecycle", "address", "member id", "role", "healthy")
        widths = [max(len(str(r[c])) for r in rows + [head]) for c in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join(["  " + fmt.format(*head)] + ["  " + fmt.format(*r) for r in rows])
