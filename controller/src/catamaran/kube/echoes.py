"""A controller's own writes, recognised when their watch events come back.

Each write a reconcile makes comes back as a watch event carrying the object exactly as the write left it. Told to
the controller, it costs a whole reconcile that finds nothing to do: with one status write per pod, that was about
one reconcile in four on each side. `OwnWrites` remembers the resourceVersion of each object's latest write by this
controller, and `skipping(handler)` tells the handler of every change but that one event (client-go's expectations
and controller-runtime's predicates serve the same end). Only the event of that exact version is skipped: a change
by anyone else, before or after, has another version and is told as ever.

The skipped reconcile would have looked again at the object with the cache up to date, so a write is remembered only
when nothing made that look worth having:
- the write left the object as the reconcile wanted it (a merge patch computed against a cache that lagged may not:
  the caller checks the answer before `wrote`);
- no reconcile of the key began after the write (`forget` at the start of each): one that did read a cache without
  the write, and may have judged "nothing to do" against what the write was about to replace.

Memory is bounded: at most `limit` objects are remembered, the oldest forgotten first (a forgotten write only costs
the reconcile it would have saved), and an object's entry goes with its deletion or its echo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Key = tuple[str | None, str]
Handler = Callable[[str, Key, Any, Any], None]

DEFAULT_LIMIT = 100_000


def resource_version(obj: Any) -> str | None:
    """The resourceVersion of an API object, as a lightkube model or as a dict."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return (obj.get("metadata") or {}).get("resourceVersion")
    metadata = getattr(obj, "metadata", None)
    return getattr(metadata, "resourceVersion", None)


class OwnWrites:
    """The resourceVersion this controller's latest write left on each object, until its watch event arrives."""

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.limit = limit
        self._versions: dict[Key, str] = {}

    def __len__(self) -> int:
        return len(self._versions)

    def wrote(self, key: Key, written: Any) -> None:
        """`written` (the API server's answer to a create, update or patch) is the object as this write left it."""
        version = resource_version(written)
        if version is None:
            return
        self._versions.pop(key, None)  # re-inserted last: the oldest entries are the first forgotten
        self._versions[key] = version
        while len(self._versions) > self.limit:
            del self._versions[next(iter(self._versions))]

    def forget(self, key: Key) -> None:
        """A reconcile of `key` begins: the echo of an earlier write is told after all (see the module's text)."""
        self._versions.pop(key, None)

    def echo(self, event: str, key: Key, new: Any) -> bool:
        """Is this change the watch event of this controller's latest write to the object? Its entry is then spent."""
        if new is None or event == "DELETED":
            self._versions.pop(key, None)
            return False
        version = self._versions.get(key)
        if version is None or version != resource_version(new):
            return False
        del self._versions[key]
        return True

    def skipping(self, handler: Handler) -> Handler:
        """`handler`, told of every change but the echoes of this controller's writes."""

        def told(event: str, key: Key, new: Any, old: Any) -> None:
            if not self.echo(event, key, new):
                handler(event, key, new, old)

        return told
