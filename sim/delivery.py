"""How events reach the function: EventBridge and Lambda's async invoke as the simulation plays
them (at least once, unordered, sometimes lost, retried; plus the periodic schedule), and the
chaos a test asks of them.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .world import Simulation


@dataclass
class Chaos:
    """What the delivery layer does to events on purpose."""

    duplicate: float = 0.0  # chance an event is delivered twice
    drop: float = 0.0  # chance an event is lost
    delay: tuple[float, float] = (0.0, 0.0)  # seconds, uniform
    reverse: bool = False  # deliver each batch of new events in reverse order
    seed: int = 7


@dataclass(order=True)
class _Pending:
    due: float
    seq: int
    event: dict = field(compare=False)
    attempt: int = field(compare=False, default=0)


class Delivery(threading.Thread):
    """EventBridge and Lambda's async invoke: at least once, unordered, sometimes lost; retried
    twice on failure; plus a periodic schedule."""

    def __init__(self, sim: "Simulation", chaos: Chaos, schedule_every: float):
        super().__init__(daemon=True)
        self.sim = sim
        self.chaos = chaos
        self.rng = random.Random(chaos.seed)
        self.schedule_every = schedule_every
        self.queue: list[_Pending] = []
        self.seq = itertools.count()
        self.stop_flag = threading.Event()
        self.drop_next_launches = 0  # events for the next N launches are lost
        self.dropped = 0
        self.failed = 0
        self.lock = threading.Lock()

    def push(self, event: dict, delay: float = 0.0, attempt: int = 0):
        with self.lock:
            heapq.heappush(self.queue, _Pending(time.monotonic() + delay, next(self.seq), event, attempt))

    def _intake(self):
        batch = self.sim.drain("events")
        self.sim.events_seen.extend(batch)
        if self.chaos.reverse:
            batch = list(reversed(batch))
        for e in batch:
            launch = e.get("detail-type", "").startswith("EC2 Instance-launch") and "EC2InstanceId" in e["detail"]
            if launch and self.drop_next_launches > 0:
                self.drop_next_launches -= 1
                self.dropped += 1
                continue
            if self.rng.random() < self.chaos.drop:
                self.dropped += 1
                continue
            copies = 2 if self.rng.random() < self.chaos.duplicate else 1
            # In EC2 an instance has its private address when its launch event fires; here the
            # instances loop tags one a moment after moto launches it: a launch event waits for
            # it (else a run with only events, no schedule, finds no instance to seed with).
            settle = 1.0 if launch else 0.0
            for _ in range(copies):
                self.push(e, max(settle, self.rng.uniform(*self.chaos.delay)))

    def run(self):
        next_schedule = time.monotonic() + self.schedule_every
        next_intake = 0.0
        while not self.stop_flag.is_set():
            now = time.monotonic()
            if now >= next_intake:  # moto asked for new events five times a second, not twenty
                self._intake()
                next_intake = now + 0.2
            now = time.monotonic()
            if now >= next_schedule:
                self.push(scheduled_event())
                next_schedule = now + self.schedule_every
            item = None
            with self.lock:
                if self.queue and self.queue[0].due <= now:
                    item = heapq.heappop(self.queue)
            if item is None:
                time.sleep(0.05)
                continue
            inv = self.sim.function.invoke(item.event, timeout=self.sim.invoke_timeout)
            if inv.outcome != "ok":
                self.failed += 1
                if item.attempt < 2:  # Lambda async: two more tries (after 1 and 2 minutes; scaled)
                    self.push(item.event, delay=0.5 * (item.attempt + 1), attempt=item.attempt + 1)

    def stop(self):
        self.stop_flag.set()
        self.join(timeout=self.sim.invoke_timeout + 10)


def scheduled_event() -> dict:
    return {
        "version": "0", "id": f"sched-{time.monotonic_ns()}", "detail-type": "Scheduled Event",
        "source": "aws.events", "account": "123456789012",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/etcd-reconcile"], "detail": {},
    }


