"""The named semaphores of a training killed with its whole process tree (supervisor, learners,
fork server and multiprocessing's resource tracker at once: ``kill -9`` of its process group,
the OOM killer, a container stopped hard) are unlinked when the next pool of learners starts.

Before, nothing unlinked them: the resource tracker that would have was killed with the rest,
and each such kill left its ``/dev/shm/sem.mp-*`` files for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synthetic import synthetic_data, write_csv

from tests.processes import alive, descendants
from trainer import checkpoint as ckpt
from trainer.ps.pool import ProcessPool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

_CHILD = """
import sys
from pathlib import Path
from trainer.data import read_labelled_csv
from trainer.engine import train
from trainer.hparams import HParams
if __name__ == "__main__":
    train(read_labelled_csv(Path(sys.argv[1])), workdir=Path(sys.argv[2]), out_dir=Path(sys.argv[3]),
          hparams=HParams(batch_size=4, min_updates=0, max_epochs=10**6, min_validation_rows=10**9,
                          cross_fit_folds=0, checkpoint_every_updates=50),
          learners=2)
"""


def _semaphores_of(pids: set[int]) -> set[Path]:
    """The named semaphores these processes have open, each mapped from its /dev/shm file (the
    creator's mapping is of the file it made and renamed: "(deleted)"; its learners' are by name)."""
    found = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "/dev/shm/sem." in line and not line.endswith("(deleted)"):
                found.add(Path(line.split()[-1]))
    return found


@pytest.mark.skipif(
    not Path("/dev/shm").is_dir(), reason="no /dev/shm (named semaphores live there on Linux)"
)
def test_the_semaphores_of_a_training_killed_with_its_whole_tree_go_when_the_next_pool_starts(
    tmp_path: Path,
) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    child = subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(write_csv(tmp_path / "t.csv", synthetic_data(40))),
            str(tmp_path / "w"),
            str(tmp_path / "o"),
        ]
    )
    try:
        deadline = time.monotonic() + 90
        while not ckpt.list_checkpoints(tmp_path / "w"):  # the learners are training by then
            assert child.poll() is None and time.monotonic() < deadline, "the child never checkpointed"
            time.sleep(0.05)
        tree = descendants(child.pid) | {child.pid}
        semaphores = _semaphores_of(tree)
        assert len(semaphores) >= 3, semaphores  # the apply lock, publish locks, parked, go...
    finally:
        tree = descendants(child.pid) | {child.pid}
        for pid in tree:  # all at once, the resource tracker with them
            os.kill(pid, signal.SIGKILL)
        child.wait(timeout=30)
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in tree):
        assert time.monotonic() < deadline, "the killed tree is still running"
        time.sleep(0.05)
    assert all(path.exists() for path in semaphores), "nothing is left to sweep: the kill was not whole"

    ProcessPool(2).close()  # the next training's pool, in this process

    assert [path for path in semaphores if path.exists()] == []
