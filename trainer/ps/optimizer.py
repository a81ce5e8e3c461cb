"""The update rule the apply role runs: SGD, or Adam made lazy on embedding rows, and the
learning rate it uses, cut on plateaus and scaled by a gradient's staleness."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OptimizerConfig:
    """The update rule the apply role runs: "adam" (lazy on rows, like SparseAdam) or "sgd"."""

    kind: str = "adam"
    lr: float = 0.003
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # reduce on plateau: the supervisor counts the epochs that did not improve the validation
    # score in the server's LR_CUTS counter (set only while every learner is parked), and every
    # apply uses lr * plateau_factor ** cuts, so all apply-role holders agree (1.0: constant)
    plateau_factor: float = 1.0
    # no applied gradient is staler than this: learners wait at start_gradient (None: no bound)
    staleness_bound: int | None = None
    # lr x staleness_scale(staleness, K); off only where tests count exact sums
    staleness_aware: bool = True

    def __post_init__(self) -> None:
        if self.staleness_bound is not None and self.staleness_bound < 0:
            raise ValueError(f"staleness_bound must be at least 0, not {self.staleness_bound}")

    @property
    def needs_unique_rows(self) -> bool:
        """Whether a pushed gradient's rows must be sorted and unique: Adam updates each row's
        moments once per step, while SGD's ``index_add_`` sums duplicate rows itself."""
        return self.kind == "adam"

    def rate(self, cuts: int) -> float:
        """The learning rate after ``cuts`` plateau cuts."""
        return self.lr * self.plateau_factor**cuts


def staleness_scale(staleness: int, learners: int) -> float:
    """The share of the learning rate a gradient applied ``staleness`` updates after the
    version it was computed against gets, with ``learners`` learners: 1 up to K - 1, then
    (K - 1) / staleness (K <= 2: 1 / staleness, Zhang et al.'s rule).

    K learners taking turns make every gradient about K - 1 updates stale; that much is what
    running K at once means, and is not scaled down. Scaling it down as well (lr / staleness,
    the rule until the twenty-third session) makes K learners one learner with a K-fold batch
    at the same rate: at K = 16 a set of 3,000 classes and 21,000 rows reached 0.847
    validation accuracy in its 20 epochs against K = 1's 0.977, and with this rule 0.975
    (16 cores; docs/benchmarks.md). A gradient staler than that (its learner was descheduled or
    slow) still takes a smaller step, in proportion.
    """
    return min(1.0, max(1, learners - 1) / max(1, staleness))


_PUT_MAX_ROWS = 16  # index_put_ is the cheaper call up to here, index_add_ past it (see add_rows)


def add_rows(param: torch.Tensor, rows: torch.Tensor, values: torch.Tensor, count: int) -> None:
    """``param[rows] += values``, duplicate rows summed, in the cheaper of two exact calls.

    index_add_ has a fixed cost of ~7 us a call; index_put_ (accumulate) has less but grows
    faster per row (one thread, 128 wide, rows of a 1 M-row table out of cache: 2 rows 5.3
    against 11.7 us, 8 rows 15 / 17, 24 rows 34 / 30, 96 rows 100 / 60). A striped landing
    makes a call per run of stripes, often on few rows. ``count``: len(rows), which the
    caller knows (``Tensor.__len__`` costs ~1.5 us).
    """
    if count <= _PUT_MAX_ROWS:
        param.index_put_((rows,), values, accumulate=True)
    else:
        param.index_add_(0, rows, values)


def _fused_adam(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    m: list[torch.Tensor],
    v: list[torch.Tensor],
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    """torch's fused Adam kernel, in place (one pass instead of eight elementwise ops)."""
    b1, b2 = opt.betas
    steps = [torch.tensor(float(step), device=p.device) for p in params]  # beside the parameters
    torch._fused_adam_(
        params,
        grads,
        m,
        v,
        [],
        steps,
        lr=lr,
        beta1=b1,
        beta2=b2,
        weight_decay=0.0,
        eps=opt.eps,
        amsgrad=False,
        maximize=False,
    )


def adam_rows(
    param: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    rows: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    """Lazy Adam on the touched rows only (SparseAdam's rule): untouched rows keep their moments.

    Gather the rows of the parameter and both moments, one fused Adam step, scatter back
    (``rows`` are unique, so index_copy_ writes each row once).
    """
    p_rows, m_rows, v_rows = param.index_select(0, rows), m.index_select(0, rows), v.index_select(0, rows)
    _fused_adam([p_rows], [grad.contiguous()], [m_rows], [v_rows], lr, step, opt)
    param.index_copy_(0, rows, p_rows)
    m.index_copy_(0, rows, m_rows)
    v.index_copy_(0, rows, v_rows)


def adam_dense(
    param: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    """Adam on the whole of a dense parameter (or a stripe's piece of one), in place."""
    _fused_adam([param], [grad.contiguous()], [m], [v], lr, step, opt)
