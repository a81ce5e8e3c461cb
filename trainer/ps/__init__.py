"""The embedded scale-up shared-memory parameter server (GaDei-style); see docs/parameter-server.md.

``server``: the learners' side, push and the staleness bound; ``applier``: parameters and
optimizer state once in shared memory, the apply role, drain, recovery and snapshots;
``optimizer``: the update rule; ``slots``: the bounded gradient slot ring and its state
machine; ``counters``: the shared counters; ``learner``: one learner's step and its process;
``pool``: the K learners of a session, driven in rounds; ``stripes``: landing in parallel;
``cuda``: learners as CUDA streams; ``graph``: one CUDA learner replaying its steps as CUDA
graphs.
"""

from trainer.ps.applier import Gradient, Stopped
from trainer.ps.counters import PSStats
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.server import ParameterServer

__all__ = ["Gradient", "OptimizerConfig", "PSStats", "ParameterServer", "Stopped"]
