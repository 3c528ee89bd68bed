"""Every replica of an `OpenAIEngine` probed and named before anything is sent.

`probe_all(urls, probe)` asks every replica at once (`resources.openai.probe.probe_server`,
so N hung replicas cost one probe timeout, not N); `check_roster(urls, infos)` decides, from
what they said, whether they form one deployment. Invariants:

- a replica's deployment is what it reports: `ServerInfo.identity` (the `owned_by` values
  and the model ids its `/models` lists), its server style and its context window
  (`deployment`); replicas of one deployment report the same;
- the fleet is refused (`check_roster` returns one line naming the replica, what it serves
  and what the first answering replica serves) when two replicas that answered report
  different deployments: a stray server's answers are never taken, nor cached, as the
  fleet's. Nothing has been sent when it is refused;
- a replica that gave no reply is not a refusal: it is given up (`resources.openai.health`)
  and probed again after its back-off; one with a 401/403 stops the run (the key is wrong).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from resources.openai.probe import ServerInfo

__all__ = ["check_roster", "deployment", "probe_all"]


def deployment(info: ServerInfo) -> str:
    """What `info`'s server is, as a one-line label: identity, style and context window."""
    return (
        f"{info.identity or '?'} (style {info.style or 'unknown'}, "
        f"context {info.max_model_len or 'unknown'})"
    )


async def probe_all(
    urls: Sequence[str], probe: Callable[[str], Awaitable[ServerInfo]]
) -> list[ServerInfo]:
    """`probe(url)` of every URL at once, in order."""
    return list(await asyncio.gather(*(probe(url) for url in urls)))


def check_roster(urls: Sequence[str], infos: Sequence[ServerInfo]) -> str | None:
    """None when every replica that answered reports the same deployment, else the refusal
    (see the module invariants)."""
    answered = [(url, info) for url, info in zip(urls, infos, strict=True) if answers(info)]
    if not answered:
        return None
    first_url, first = answered[0]
    for url, info in answered[1:]:
        if deployment(info) != deployment(first):
            return (
                f"replica {url} serves {deployment(info)}, not what {first_url} serves: "
                f"{deployment(first)}; refusing the fleet before sending (list replicas of "
                "one deployment in base_url)"
            )
    return None


def answers(info: ServerInfo) -> bool:
    """The replica answered its probe (`GET /models`) without an auth error."""
    return info.identity is not None and info.auth_error is None
