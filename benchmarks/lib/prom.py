"""Read a Prometheus `/metrics` page (text exposition format 0.0.4): vLLM, llama.cpp, the sim.

`scrape(url)` -> {sample name: value summed over its label sets}, e.g.
`scrape(f"{server.url}/metrics")["vllm:prefix_cache_hits_total"]`. `samples(text)` keeps the
labels, `types(text)` reads the `# TYPE` lines. Invariants: comment lines other than `# TYPE`
are skipped; a sample line is `name[{labels}] value [timestamp]`, label values may hold any
escaped character (`\\"`, `\\\\`, `\\n`, and `}` or spaces inside the quotes); a line that is
neither is an error naming it, never skipped silently.
"""

from __future__ import annotations

import re

import httpx

__all__ = ["sample_sums", "samples", "scrape", "types"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _labels(text: str, line: str) -> dict[str, str]:
    labels, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"bad labels in metrics line {line!r}")
        labels[m[1]] = re.sub(r"\\.", lambda e: _UNESCAPE.get(e[0], e[0]), m[2])
        pos = m.end()
    return labels


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a metrics page: (name, labels, value), in page order."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        out.append((m[1], _labels(m[2] or "", line), float(m[3])))
    return out


def types(text: str) -> dict[str, str]:
    """Metric name -> its `# TYPE` ("counter", "gauge", "histogram", ...)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            found[parts[2]] = parts[3]
    return found


def sample_sums(text: str) -> dict[str, float]:
    """Sample name -> its value summed over every label set."""
    sums: dict[str, float] = {}
    for name, _, value in samples(text):
        sums[name] = sums.get(name, 0.0) + value
    return sums


def scrape(url: str, *, timeout_s: float = 10.0) -> dict[str, float]:
    """GET `url` (a `/metrics` page) and sum each sample over its labels (`sample_sums`)."""
    return sample_sums(httpx.get(url, timeout=timeout_s).raise_for_status().text)
