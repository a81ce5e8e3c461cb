"""The learner step's inputs and gradient: mini-batches as the learner walks its shard, and
TextClassifierTask's closed-form gradient against autograd's on the same model and batch.

The learner step writes the gradient out by hand (trainer.step); ``AutogradTask``
(benchmarks/step_bench.py, the step as it was and the benchmark's baseline) differentiates
the same forward by autograd. Batches come from hypothesis: empty bags, ids repeated within
and across bags, any class weights, single- and multi-label targets, coalesced (Adam) or raw
(SGD) rows.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.step_bench import AutogradTask
from trainer.features import Bags
from trainer.ps.applier import Gradient
from trainer.ps.learner import batches
from trainer.step import Batch, TextClassifierTask

TABLE, DIM = 13, 6


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Bags, np.ndarray, int, bool, np.ndarray | None]:
    classes = draw(st.integers(2, 5))
    lengths = draw(st.lists(st.integers(0, 7), min_size=1, max_size=6))
    count = sum(lengths)
    ids = draw(st.lists(st.integers(0, TABLE - 1), min_size=count, max_size=count))
    weights = draw(st.lists(st.floats(0.0625, 2.0, width=32), min_size=count, max_size=count))
    multi_label = draw(st.booleans())
    targets = (
        np.array(
            draw(
                st.lists(
                    st.lists(st.integers(0, 1), min_size=classes, max_size=classes),
                    min_size=len(lengths),
                    max_size=len(lengths),
                )
            ),
            dtype=np.uint8,
        )
        if multi_label
        else np.array(
            draw(st.lists(st.integers(0, classes - 1), min_size=len(lengths), max_size=len(lengths)))
        )
    )
    class_weights = (
        None
        if multi_label or draw(st.booleans())
        else np.array(draw(st.lists(st.floats(0.125, 8.0, width=32), min_size=classes, max_size=classes)))
    )
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    bags = Bags(np.array(ids, dtype=np.int64), np.array(weights, dtype=np.float32), offsets)
    return bags, targets, classes, multi_label, class_weights


@settings(max_examples=200, deadline=None)
@given(
    case=_cases(),
    unique_rows=st.booleans(),
    seed=st.integers(0, 2**16),
    direct=st.sampled_from([0, 1, 4]),
    direct_scale=st.floats(0.25, 4.0),
    sentence_width=st.sampled_from([0, 1, 4]),
)
def test_the_closed_form_gradient_is_autograds(
    case: tuple[Bags, np.ndarray, int, bool, np.ndarray | None],
    unique_rows: bool,
    seed: int,
    direct: int,
    direct_scale: float,
    sentence_width: int,
) -> None:
    """``sentence_width``: an encoder model's sentence rows, the table's last (their gradient
    summed over the batch and pushed once each); ``direct``: its direct path reading them
    (trainer.model), a fourth parameter."""
    bags, targets, classes, multi_label, class_weights = case
    sentence_width = direct or sentence_width
    generator = torch.Generator().manual_seed(seed)
    params = [torch.randn(TABLE, DIM, generator=generator), torch.randn(classes, DIM, generator=generator)]
    params.append(torch.randn(classes, generator=generator))
    if direct:
        params.append(torch.randn(classes, direct, generator=generator))
    weights = None if class_weights is None else torch.from_numpy(class_weights).float()
    batch = Batch.of(bags, targets)
    closed_form, autograd = (
        kind(
            unique_rows=unique_rows,
            multi_label=multi_label,
            class_weights=weights,
            direct_scale=direct_scale,
            sentence_width=sentence_width,
        )
        for kind in (TextClassifierTask, AutogradTask)
    )
    closed_form.attach(params)
    autograd.attach([p.clone() for p in params])

    loss, gradient = closed_form.compute(None, batch)
    expected_loss, expected = autograd.compute(None, batch)

    assert np.isclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    assert len(gradient.rows) == len(gradient.values[0])
    if sentence_width:  # the sentence rows once each, after the n-grams': the same sum per row
        first = TABLE - sentence_width
        assert torch.equal(gradient.rows[gradient.rows >= first].sort().values, torch.arange(first, TABLE))
        torch.testing.assert_close(_dense(gradient), _dense(expected), rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(gradient.rows, expected.rows)  # unique_rows: sorted, each once; else the ids
        torch.testing.assert_close(gradient.values[0], expected.values[0], rtol=1e-5, atol=1e-6)
    if unique_rows:
        assert torch.equal(gradient.rows, gradient.rows.unique())  # sorted, each once
    for got, want in zip(gradient.values[1:], expected.values[1:], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert all(param.grad is None and not param.requires_grad for param in params)  # nothing written


def _dense(gradient: Gradient) -> torch.Tensor:
    """The table's gradient as a whole (duplicate rows summed)."""
    return torch.zeros(TABLE, DIM).index_add_(0, gradient.rows, gradient.values[0])


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    batch_size=st.integers(1, 7),
    chunk=st.integers(1, 4),
    start_share=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_chunked_batches_are_each_batchs_own_select(
    lengths: list[int], batch_size: int, chunk: int, start_share: float, seed: int
) -> None:
    """trainer.ps.learner.batches gathers a chunk of mini-batches at once and slices it: each
    batch and the position after it must be what a select of that batch alone gives."""
    count = sum(lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    bags = Bags(np.arange(count, dtype=np.int64), np.linspace(0.1, 1.0, count, dtype=np.float32), offsets)
    targets = np.arange(len(lengths)) % 3
    shard = np.random.default_rng(seed).permutation(len(lengths))[::2]
    start = int(start_share * len(shard))

    walked = list(batches(bags, targets, shard, start, batch_size, chunk))

    expected_ends = [
        min(end, len(shard)) for end in range(start + batch_size, len(shard) + batch_size, batch_size)
    ]
    assert [end for _, end in walked] == expected_ends
    for (batch, end), begin in zip(walked, range(start, len(shard), batch_size), strict=True):
        alone = Batch.of(bags.select(shard[begin:end]), targets[shard[begin:end]])
        for field in ("ids", "offsets", "weights", "targets"):
            assert torch.equal(getattr(batch, field), getattr(alone, field)), field
