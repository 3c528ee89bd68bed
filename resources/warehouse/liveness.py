"""May the warehouse drop a table version that a run wrote? Only when the run is seen finished.

Several Dagster instances can share one `$LLM_ASSETS_HOME` (two code locations with their own
`DAGSTER_HOME`, `dagster job execute` without one: an ephemeral instance, a test's in-memory
instance). A run is only visible in the instance that launched it, so "not in my instance"
does not mean "finished". Each version therefore records the identity of the instance that
wrote it (`instance_identity`), and `Liveness.may_drop` decides:

- the run is visible in this instance: droppable once it has finished;
- not visible, written by this instance: the run was deleted from it; droppable;
- not visible, written by another instance (or by a version row from before identities were
  recorded): this instance cannot know; kept until it is `unknown_run_keep_s` old;
- written outside any run (no instance: `build_output_context`): droppable.

Identity: an ephemeral instance's is random per instance object (nobody else can see its
runs); a persistent instance's is a random id stored once in its run storage's key-value
table, so every process on that storage (one `DAGSTER_HOME`, one Postgres database) shares
it. Two processes creating it at once may each keep their own for a while: the rule above
still never drops a live run's version, since a visible run is judged by its status.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from typing import Any

IDENTITY_KEY = "llm_assets/instance_id"
NO_INSTANCE = "none"
"""The identity recorded for a version written outside a run."""

_known: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def instance_identity(instance: Any) -> str:
    """This instance's identity (see the module docstring), cached per instance object."""
    with _lock:
        known = _known.get(instance)
    if known is not None:
        return known
    if instance.is_ephemeral:
        identity = "ephemeral-" + uuid.uuid4().hex
    else:
        storage = instance.run_storage
        identity = storage.get_cursor_values({IDENTITY_KEY}).get(IDENTITY_KEY)
        if not identity:
            storage.set_cursor_values({IDENTITY_KEY: "instance-" + uuid.uuid4().hex})
            identity = storage.get_cursor_values({IDENTITY_KEY})[IDENTITY_KEY]
    with _lock:
        return _known.setdefault(instance, identity)


class Liveness:
    """What one writer (a step of a run in `instance`, or none) knows about other runs."""

    def __init__(self, instance: Any | None, unknown_run_keep_s: float):
        self.instance = instance
        self.identity = NO_INSTANCE if instance is None else instance_identity(instance)
        self.unknown_run_keep_s = unknown_run_keep_s

    def may_drop(self, run_id: str | None, writer: str | None, created: float) -> bool:
        """Whether the version `run_id` wrote (recorded by instance `writer` at `created`, a
        Unix time) may be dropped now; see the module docstring."""
        if not run_id or writer == NO_INSTANCE:
            return True
        run = self.instance.get_run_by_id(run_id) if self.instance is not None else None
        if run is not None:
            return run.is_finished
        if writer is not None and writer == self.identity:
            return True  # this instance wrote it and no longer has the run: deleted
        return time.time() - created >= self.unknown_run_keep_s
