"""Shared int64 counters of one parameter-server session, fastText-style.

One shared tensor of shape (1 + K, FIELDS): row 0 is the server's (written only by the party
holding the apply role), row 1 + r is learner r's (written only by learner r). A counter
therefore has exactly one writer at any time and needs no atomic instruction; readers
(the supervisor, progress) may see a value one update old, never a torn one (aligned int64
stores are single instructions on every platform torch supports). Python touches them
through a numpy view: an item store costs ~100 ns where a tensor op costs microseconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

# Row 0: the server. Written only under the apply role (the apply lock), or by the
# supervisor while every learner is parked.
VERSION = 0  # updates applied (the model's version); staleness is measured against it
APPLIED = 1  # gradients applied (== VERSION within a session; kept apart for clarity)
DIRECT = 2  # pushes applied on the direct path (the pusher held the apply role; no slot copy)
APPLY_NS = 3  # nanoseconds spent applying
BYTES_APPLIED = 4  # gradient bytes applied to the parameters
STOP = 5  # 1: learners leave at their next check
PAUSE = 6  # 1: learners park at their next step boundary
ERROR = 7  # 0 or a learner's rank + 1 that met a non-finite loss
HIST = 8  # staleness histogram: 0, 1, 2, 3, 4-7, 8-15, 16+ (7 buckets)
HIST_BUCKETS = 7
LR_CUTS = HIST + HIST_BUCKETS  # plateau cuts of the learning rate so far (OptimizerConfig.rate)
# 1: a learner died (set by the supervisor with PAUSE): a learner waiting for a stripe gives
# up, since the stripe's holder may be the dead one (trainer.ps.stripes)
DEATH = LR_CUTS + 1
SERVER_FIELDS = DEATH + 1

# Rows 1..K: one learner each, written only by that learner except CURSOR (see below).
PUSH_NS = 0  # time in push (slot wait + copy, or the direct apply it did for itself)
PULL_NS = 1  # time gathering the rows a mini-batch touched
COMPUTE_NS = 2  # forward + backward
BYTES_PUSHED = 3  # gradient bytes copied into slots
BYTES_PULLED = 4  # parameter bytes gathered by pull
SAMPLES = 5  # examples whose gradient was pushed
STEPS = 6  # gradients this learner computed (pushed or lost with the learner)
EPOCH = 7  # command from the supervisor: the epoch to work on
START = 8  # command from the supervisor: position in the learner's shard to start from
CURSOR = 9  # position after this learner's last applied gradient: written under the apply role
DONE = 10  # 1: this learner reached END; 2: it met a non-finite loss
PARKED = 11  # 1: this learner is parked (set by it, cleared by the supervisor at each start)
COPY_NS = 12  # of PUSH_NS: copying gradients into the slot (the PS's data movement, with applies)
# 1 + the version this learner's current gradient is computed against, from the read of that
# version until the gradient is applied directly, published in the slot, or given up (0: none).
# With a staleness bound, the gate reads it under the apply role (ParameterServer.start_gradient)
COMPUTING = 13
WAIT_NS = 14  # time waiting at the staleness bound's gate before reading the version
# Striped servers: the version of the gradient this learner is landing (set under the apply
# role when the gradient is ordered, cleared once all its stripes landed; 0: none). Learners
# compute against the versions below every one of these; a learner that dies or gives up
# with it set leaves parameters only partly updated (ParameterServer.recover).
LANDING = 15
LAND_NS = 16  # time landing this learner's gradients stripe by stripe, outside the apply role
END = 17  # command from the supervisor: the position in its shard to park at (trainer.averaging)
LEARNER_FIELDS = 18

FIELDS = max(SERVER_FIELDS, LEARNER_FIELDS)


def staleness_bucket(staleness: int) -> int:
    """Histogram bucket of a staleness value (0, 1, 2, 3, 4-7, 8-15, 16+)."""
    if staleness < 4:
        return max(staleness, 0)
    if staleness < 8:
        return 4
    return 5 if staleness < 16 else 6


@dataclass(frozen=True)
class PSStats:
    """A snapshot of the counters, JSON-safe, for progress reports and benchmarks."""

    learners: int
    version: int
    pushed: int
    applied: int
    direct: int
    staleness_histogram: list[int]
    push_s: float
    copy_s: float
    pull_s: float
    wait_s: float
    apply_s: float
    land_s: float  # striped servers: the learners' time landing outside the apply role
    compute_s: float
    bytes_pushed: int
    bytes_pulled: int
    bytes_applied: int

    def as_dict(self) -> dict[str, object]:
        """JSON-safe dict of every field."""
        return asdict(self)


class Counters:
    """Numpy view of the shared counter tensor; ``tensor`` is what travels to learners."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.array = tensor.numpy()
        self.server = self.array[0]
        self.learners = tensor.shape[0] - 1

    @classmethod
    def create(cls, learners: int, shared: bool) -> Counters:
        """Zeroed counters for ``learners`` learners, in shared memory when ``shared``."""
        tensor = torch.zeros((1 + learners, FIELDS), dtype=torch.int64)
        return cls(tensor.share_memory_() if shared else tensor)

    def learner(self, rank: int) -> np.ndarray:
        """Learner ``rank``'s row (a view: stores go to shared memory)."""
        return self.array[1 + rank]

    def stats(self, pushed: int) -> PSStats:
        """Snapshot; ``pushed`` comes from the slot ring (it is counted where it is committed)."""
        rows, s = self.array[1:], self.server
        return PSStats(
            learners=self.learners,
            version=int(s[VERSION]),
            pushed=pushed,
            applied=int(s[APPLIED]),
            direct=int(s[DIRECT]),
            staleness_histogram=[int(v) for v in s[HIST : HIST + HIST_BUCKETS]],
            push_s=float(rows[:, PUSH_NS].sum()) / 1e9,
            copy_s=float(rows[:, COPY_NS].sum()) / 1e9,
            pull_s=float(rows[:, PULL_NS].sum()) / 1e9,
            wait_s=float(rows[:, WAIT_NS].sum()) / 1e9,
            apply_s=float(s[APPLY_NS]) / 1e9,
            land_s=float(rows[:, LAND_NS].sum()) / 1e9,
            compute_s=float(rows[:, COMPUTE_NS].sum()) / 1e9,
            bytes_pushed=int(rows[:, BYTES_PUSHED].sum()),
            bytes_pulled=int(rows[:, BYTES_PULLED].sum()),
            bytes_applied=int(s[BYTES_APPLIED]),
        )
