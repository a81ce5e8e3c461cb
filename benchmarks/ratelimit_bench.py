"""A tenant flooding over its classify rate: what each refused call costs the API replica.

    python benchmarks/ratelimit_bench.py [--redis-url redis://127.0.0.1:6379/15] [--calls 2000]

Drives ``service.tenants.ratelimit.RateLimiter`` against a real Redis, as the classify routes do
(``acquire_nowait`` on the event loop, then ``acquire`` on one of the classify threads when
that needs Redis), side by side in one run:

* ``served``: calls of a tenant well under its rate at 1 call/s, each needing a Redis round
  trip (the cost every Redis-bound call has; the baseline);
* ``refused``: calls of a tenant over its rate (1 call/s, burst spent), one after another.

Per kind: microseconds per call, the share of calls that asked Redis, and the share that
needed a classify thread (``acquire_nowait`` could not answer). ``ratio`` is the refused
call's cost over the served one's. Since the thirty-fifth session a refusal is remembered
until the bucket's room comes back, so a flood's calls are answered on the event loop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from service.core.errors import RateLimited  # noqa: E402
from service.tenants.ratelimit import RateLimiter  # noqa: E402


def _calls(limiter: RateLimiter, tenants: list[str], per_second: int) -> dict[str, Any]:
    """One call for each of ``tenants`` in turn; what they cost and what they needed."""
    script, asked = limiter._script, [0]
    assert script is not None

    def counted(**kwargs: Any) -> Any:
        asked[0] += 1
        return script(**kwargs)

    limiter._script = counted  # type: ignore[assignment]
    threaded = refused = 0
    started = time.perf_counter()
    try:
        for tenant in tenants:
            try:
                if not limiter.acquire_nowait("classify_rps", tenant, per_second):
                    threaded += 1
                    limiter.acquire("classify_rps", tenant, per_second)
            except RateLimited:
                refused += 1
    finally:
        limiter._script = script
    seconds = time.perf_counter() - started
    return {
        "calls": len(tenants),
        "refused": refused,
        "us_per_call": round(seconds / len(tenants) * 1e6, 1),
        "asked_redis": round(asked[0] / len(tenants), 3),
        "needed_a_thread": round(threaded / len(tenants), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15", help="a Redis to use")
    parser.add_argument("--calls", type=int, default=2000, help="calls of each kind (default 2000)")
    args = parser.parse_args()
    limiter = RateLimiter(args.redis_url, burst_seconds=1.0)
    try:
        run = uuid.uuid4().hex
        # a new tenant per call: each well under its rate, each asking Redis
        served = _calls(limiter, [f"bench-{run}-{i}" for i in range(args.calls)], 1)
        flooder = f"bench-{run}-flood"
        limiter.acquire("classify_rps", flooder, 1)  # its burst (one call) spent
        refused = _calls(limiter, [flooder] * args.calls, 1)
    finally:
        limiter.close()
    print(
        json.dumps(
            {
                "served": served,
                "refused": refused,
                "ratio": round(refused["us_per_call"] / served["us_per_call"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
