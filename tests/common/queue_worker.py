"""A queue consumer in its own process, so a test can SIGKILL it as a crash would.

It processes entries the way the tests' in-process consumers do (count the entry id in a
results hash, then acknowledge), and after `--hold-after` entries it takes one more
batch, records those ids in a "holding" hash, and waits without acknowledging: the test
kills it there.
"""

from __future__ import annotations

import argparse
import asyncio

import redis.asyncio as aioredis

from etude.common.payloads import RolloutRequest
from etude.common.queue import WorkQueue
from etude.common.settings import QueueSettings


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("stream")
    parser.add_argument("group")
    parser.add_argument("consumer")
    parser.add_argument("--claim-idle-seconds", type=float, required=True)
    parser.add_argument("--results-key", required=True)
    parser.add_argument("--holding-key", required=True)
    parser.add_argument("--hold-after", type=int, default=0)
    parser.add_argument("--count", type=int, default=1)
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = aioredis.Redis.from_url(args.url, socket_timeout=10)
    queue = WorkQueue(
        client,
        args.stream,
        args.group,
        args.consumer,
        (RolloutRequest,),
        QueueSettings(claim_idle_seconds=args.claim_idle_seconds),
    )
    processed = 0
    while processed < args.hold_after:
        for delivery in await queue.get(count=args.count, block_ms=200):
            await client.hincrby(args.results_key, delivery.entry_id, 1)
            await queue.ack(delivery.entry_id)
            processed += 1
    held: list[str] = []
    while not held:
        held = [delivery.entry_id for delivery in await queue.get(args.count, block_ms=200)]
    await client.hset(args.holding_key, mapping=dict.fromkeys(held, args.consumer))
    await asyncio.Event().wait()  # "working" on the held entries until killed


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
