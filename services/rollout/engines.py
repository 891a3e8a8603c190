"""Which inference engines a rollout worker routes among, from `ETUDE_SERVICES__INFERENCE`:
comma-separated `host:port` entries, each name resolved to all of its addresses — a
Kubernetes headless Service (the chart's inference workers) resolves to one address per pod.
Resolved again every `interval` seconds: engines that appear join the router (taking
requests once they serve the current version), engines that vanish leave it."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from etude.rollout.router import Engine, Router

log = logging.getLogger(__name__)


def split_entries(value: str) -> list[tuple[str, int]]:
    entries = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"an inference address is host:port, got {entry!r}")
        entries.append((host.strip("[]"), int(port)))
    if not entries:
        raise ValueError("no inference address")
    return entries


def resolve(value: str) -> list[str]:
    """Every engine address the entries name, in a stable order."""
    addresses: list[str] = []
    for host, port in split_entries(value):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            log.warning("cannot resolve inference address %s: %s", host, error)
            continue
        for info in sorted({i[4][0] for i in infos}):
            address = f"[{info}]:{port}" if ":" in info else f"{info}:{port}"
            if address not in addresses:
                addresses.append(address)
    return addresses


async def keep_resolved(
    router: Router, value: str, connect: Callable[[str], Engine], interval: float = 30.0
) -> None:
    """Reconcile the router's engines with what `value` resolves to, forever."""
    while True:
        await asyncio.sleep(interval)
        found = await asyncio.to_thread(resolve, value)
        if not found:  # a DNS outage is not every engine leaving
            continue
        for address in found:
            if address not in router.names:
                log.info("inference engine %s joined", address)
                router.add_engine(address, connect(address))
        for address in [n for n in router.names if n not in found]:
            log.info("inference engine %s left", address)
            client = router.remove_engine(address)
            close = getattr(client, "close", None)
            if close is not None:
                await close()
