"""A real Prometheus for tests, and the PromQL the chart ships (dashboards and rules).

`Prometheus` runs Debian's `prometheus` binary on loopback with file-based service discovery,
so targets can be added while it runs (rollout workers and the trainer appear late in a
training run). The helpers pull every expression out of the chart's Grafana dashboards and
PrometheusRules and make them evaluable outside Grafana.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from etude.common.net import free_port


@dataclass(frozen=True, slots=True)
class Expression:
    where: str  # "dashboard <file>: <panel>" or "rule <group>/<name>"
    expr: str
    alert: bool = False


def dashboard_expressions(directory: Path) -> list[Expression]:
    """`targets[].expr` of every panel (rows' nested panels included) of every dashboard."""
    found: list[Expression] = []

    def walk(panels: list[dict[str, Any]], file: str) -> None:
        for panel in panels:
            walk(panel.get("panels", []), file)
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append(
                        Expression(f"dashboard {file}: {panel.get('title')}", target["expr"])
                    )

    for path in sorted(directory.glob("*.json")):
        walk(json.loads(path.read_text()).get("panels", []), path.name)
    return found


def rule_expressions(rules: dict[str, Any]) -> list[Expression]:
    """Every recording and alerting rule of a PrometheusRule `spec` (a rules file)."""
    return [
        Expression(
            f"rule {group['name']}/{rule.get('record') or rule.get('alert')}",
            rule["expr"],
            alert="alert" in rule,
        )
        for group in rules.get("groups", [])
        for rule in group.get("rules", [])
    ]


# Grafana's built-in intervals; 1m spans 60 scrapes at the test's 1 s interval.
INTERVALS = {"__rate_interval": "1m", "__interval": "1m", "interval": "1m", "__range": "5m"}


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Grafana variables replaced: intervals by durations, `label="$v"` and `$v` inside a
    regex matcher by `.*` (every value), other `$v` by `values[v]`."""
    values = values or {}
    name = r"\$(?:\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|(\w+))"

    def interval(m: re.Match[str]) -> str:
        var = next(g for g in m.groups() if g)
        return INTERVALS.get(var, m.group(0))

    expr = re.sub(name, interval, expr)
    # `label="$v"` matches exactly one value; the test wants them all.
    expr = re.sub(r'(\w+)\s*=\s*"' + name + '"', r'\1=~".*"', expr)

    def in_regex(m: re.Match[str]) -> str:
        return re.sub(name, ".*", m.group(0))

    expr = re.sub(r'=~\s*"[^"]*"', in_regex, expr)

    def other(m: re.Match[str]) -> str:
        var = next(g for g in m.groups() if g)
        if var not in values:
            raise KeyError(f"no value for Grafana variable ${var} in {expr!r}")
        return values[var]

    return re.sub(name, other, expr)


_THRESHOLD = re.compile(
    r"\s*(?:>=|<=|==|!=|>|<)\s*(?:bool\s+)?-?(?:\d+\.?\d*(?:e-?\d+)?|\.\d+|Inf|NaN)\b",
    re.IGNORECASE,
)


def without_thresholds(expr: str) -> str:
    """An alert's condition without its `> 0.5`-style comparisons: the series it watches,
    which exist whether or not the alert fires. `absent(x)` becomes `x`."""
    expr = _THRESHOLD.sub("", expr)
    return re.sub(r"\babsent(?:_over_time)?\s*\(", "(", expr)


def selectors(expr: str) -> list[str]:
    """Metric names an expression reads (for messages that say what is missing)."""
    names = set(re.findall(r"\b([a-zA-Z_:][\w:]*)\s*(?:\{|\[)", expr))
    names |= set(re.findall(r"\b(etude_\w+|[a-z_]+:[\w:]+)\b", expr))
    return sorted(names)


class Prometheus:
    """`prometheus` on a free loopback port, scraping `file_sd` targets every second."""

    def __init__(self, workdir: Path, rule_files: list[Path] = ()) -> None:
        self.workdir = workdir
        self.targets_path = workdir / "targets.json"
        self.targets_path.write_text("[]")
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{
                "job_name": "etude",
                "file_sd_configs": [{"files": [str(self.targets_path)], "refresh_interval": "1s"}],
            }],
        }  # fmt: skip
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not on PATH"
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1).read()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus never became ready:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-3000:]

    def set_targets(self, targets: dict[str, dict[str, str]]) -> None:
        """`{metrics URL: target labels}`: what Prometheus scrapes from now on."""
        groups = []
        for url, labels in sorted(targets.items()):
            parsed = urllib.parse.urlparse(url)
            groups.append(
                {"targets": [parsed.netloc], "labels": {**labels, "__metrics_path__": parsed.path}}
            )
        tmp = self.targets_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_path)  # Prometheus never reads half a file

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant result of `expr` now; raises on a PromQL error."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{expr!r}: {error.read().decode()}") from None
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data["result"]]

    def up_targets(self) -> Iterator[str]:
        for target in self.api("targets")["activeTargets"]:
            if target["health"] == "up":
                yield target["labels"].get("container", target["scrapeUrl"])
