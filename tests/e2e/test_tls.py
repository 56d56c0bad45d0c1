"""Mutual TLS on real etcd, moto and the real binary (TLS=managed, the simulation's default):
members refuse whoever lacks one of the cluster's certificates, keys stay secret, and
certificates renew by replacing members one at a time."""

import os
import ssl
import stat
import time
import urllib.request

import pytest

from conftest import wait_for
from sim import etcd


def test_members_refuse_plain_http_and_tls_without_a_client_certificate(simulation):
    sim = simulation(writer=False)
    assert sim.tls, "TLS is the simulation's default"
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    iid = next(iter(sim.instances))
    url = sim.client_url(iid)
    assert url.startswith("https://")
    etcd.put(url, "/tls/ok", "yes", timeout=5)  # with the CLI-issued client certificate
    address = sim.instances[iid].address
    ca = f"{sim.client_cert_dir}/ca.crt"
    # TLS without a client certificate: the handshake is refused.
    anonymous = ssl.create_default_context(cafile=ca)
    with pytest.raises(OSError):
        urllib.request.urlopen(urllib.request.Request(f"{url}/v3/maintenance/status", data=b"{}"),
                               timeout=3, context=anonymous).read()
    # Plain HTTP on the client port: no API.
    try:
        urllib.request.urlopen(urllib.request.Request(f"http://{address}:2379/v3/maintenance/status",
                                                      data=b"{}"), timeout=3).read()
        raise AssertionError("plain HTTP answered on the client port")
    except OSError:
        pass
    # The metrics listener answers health checks in plain HTTP (the load balancer's).
    with urllib.request.urlopen(f"http://{address}:2381/health", timeout=3) as r:
        assert r.status == 200
    # The member's key: a SecureString, written 0600 on its instance, never in the function's log.
    p = sim.ssm.get_parameter(Name=f"{sim.prefix}/tls/{iid}", WithDecryption=True)["Parameter"]
    assert p["Type"] == "SecureString"
    key_file = f"{sim.instances[iid].data_dir}/pki/member.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with open(key_file) as f:
        key = f.read().strip()
    assert key in p["Value"]
    body = key.splitlines()[1]
    with open(f"{sim.workdir}/function.log") as f:
        assert body not in f.read()
    ca_param = sim.ssm.get_parameter(Name=f"{sim.prefix}/pki/ca", WithDecryption=True)["Parameter"]
    assert ca_param["Type"] == "SecureString"
    # A removed member's key material goes with its config.
    sim.scale(2)
    sim.wait_converged(2, label="scale in")
    gone = next(i for i in sim.instances if i not in {g["InstanceId"] for g in sim.group_instances()})
    names = sim.parameters()
    assert f"{sim.prefix}/tls/{gone}" not in names and f"{sim.prefix}/certs/{gone}" not in names


def test_certificates_renew_by_replacing_members_one_at_a_time_with_no_write_lost(simulation):
    life = 120
    sim = simulation(function_env={"MEMBER_CERT_SECS": str(life)})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    originals = {g["InstanceId"] for g in sim.group_instances()}
    sim.start_writer()
    # Each is replaced once less than a third of its life is left (after ~80 s), one at a time.
    wait_for("every original member replaced", 420,
             lambda: not originals & {g["InstanceId"] for g in sim.group_instances()})
    sim.wait_converged(3, label="rotated", timeout=120)
    time.sleep(1)
    sim.writer.stop()
    lost = sim.writer.lost()
    print(f"rotation: {len(sim.writer.acked)} acknowledged writes, {len(lost)} lost, longest stall "
          f"{sim.writer.longest_stall:.1f}s")
    assert not lost, lost[:10]
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert log.count("member certificate past two thirds of its life") >= 3
