"""An engine for tests whose answers the test can predict from its own tables: the simulated
engine's accounting (tokens, cache hits, timing) with each answer replaced by `answer(request)`,
counting the requests it is sent."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from resources.engine import EngineWrapper, Request, RunResult
from resources.sim.engine import SimulatedEngine


class AnsweringEngine(EngineWrapper):
    def __init__(self, answer: Callable[[Request], str]) -> None:
        super().__init__(SimulatedEngine())
        self.answer = answer
        self.sent = 0

    def run(self, relquery_id, requests):
        result = self.inner.run(relquery_id, requests)
        by_id = {r.id: r for r in requests}
        self.sent += len(requests)
        responses = [
            dataclasses.replace(resp, text=self.answer(by_id[resp.id])) for resp in result.responses
        ]
        return RunResult(responses, result.stats)
