"""moto server with the Auto Scaling lifecycle that moto lacks.

moto stores lifecycle hooks but ignores them: instances go straight to InService and vanish at
once on termination. This launcher extends moto's backend classes before serving them, following
AWS's semantics (shared/reference/aws-lifecycle.md), one concern a module of sim/emulator/:

- lifecycle.py: lifecycle hooks. Held actions (``Pending:Wait``, ``Terminating:Wait``) with a
  token and one EventBridge event each, ``CompleteLifecycleAction`` and
  ``RecordLifecycleActionHeartbeat`` answering like AWS, heartbeat and global timeouts,
  ``PutLifecycleHook``'s test notification, ``SetInstanceHealth`` replacing an Unhealthy instance.
- zones.py: Availability Zones. Launches balanced across the group's zones (never an impaired
  one), scale-in from the zone with the most, AZRebalance one step on request.
- cfn_shims.py: CloudFormation (sim/stack.py creates the stack of template.yaml here): what
  moto's models of the template's resources leave out, done as AWS documents it.
- routes.py: the fault layer in front of moto (sim/faults.py), S3's CompleteMultipartUpload root
  element, and the routes for the simulation only (``/_sim/events``, ``/_sim/zones``, ...).

- refresh.py: instance refresh. StartInstanceRefresh with its preferences (minimum and maximum
  healthy percentages, warmup, checkpoints), DescribeInstanceRefreshes, CancelInstanceRefresh,
  RollbackInstanceRefresh; replacements through the hooks, stepped on the timer; each launch's
  configuration generation (``/_sim/generations``).

Not emulated: warm pools (DescribeWarmPool answers; nothing else of them), health checks of
their own (EC2 status checks, ELB: only ``SetInstanceHealth`` marks an instance unhealthy;
``ShouldRespectGracePeriod`` is recorded but ignored, and the replacement happens at once, not
at the next health check), the instance maintenance policy (a replacement always
launches while the old instance is held, whatever the policy), suspended processes beyond what
``SuspendProcesses`` records and ``ReplaceUnhealthy`` (lifecycle.py), cooldowns.

Every request is served under one lock, so the timer thread here and requests never interleave.

Run: python sim/moto_lifecycle.py [--port-file FILE] (or python -m sim.moto_lifecycle).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sim.emulator import cfn_shims, lifecycle, refresh, routes, zones  # noqa: E402

def install():
    """moto's classes extended (each module keeps moto's own methods it builds on)."""
    cfn_shims.install()
    zones.install()
    refresh.install()  # around zones' launches
    lifecycle.install()


def _timeouts(stop: threading.Event):
    while not stop.wait(0.2):
        with lifecycle.LOCK:
            lifecycle.lapse_due()
            zones.rebalance_step()
            refresh.step()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args(argv)
    install()
    server = make_server(args.host, args.port, routes.app_with_lock(DomainDispatcherApplication(create_backend_app)), threaded=True)
    port = server.server_port
    os.environ["MOTO_PORT"] = str(port)
    stop = threading.Event()
    threading.Thread(target=_timeouts, args=(stop,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), threading.Thread(target=server.shutdown).start()))
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"moto with lifecycle hooks on http://{args.host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
