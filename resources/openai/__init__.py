"""Any OpenAI-compatible server, or a fleet of them, as an `LLMEngine` (`engine.OpenAIEngine`).

`engine` drives a run; `run` serves it over the replicas; `placement` plans which replica serves
which requests and `fleet` serves that plan; `request` is one request's attempts, deadlines and
retries, `attempt` one attempt, `lean` the hand-written HTTP/1.1 path; `wire` checks what travels
both ways and `probe` asks a server what it is before anything is sent.
"""
