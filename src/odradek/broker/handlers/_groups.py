"""What the group API handlers (k08-k16, k42, k47) share: constants and entity building."""

from __future__ import annotations

from typing import Any

from odradek.broker.registry import RequestContext, make


def nested(ctx: RequestContext, class_name: str, **fields: Any) -> Any:
    """Like ctx.nested, but a field may be called `name` (topic entries)."""
    return make(getattr(ctx.module, class_name), **fields)
