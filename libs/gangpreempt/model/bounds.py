"""The ranges model integers may take, checked whenever a model object is decoded (a
state event on the bus): a count or a quantity is never negative, a priority is an
int32 as in Kubernetes. Constructors do not check (msgspec validates on decode only);
the manifest readers check what they read themselves."""

from __future__ import annotations

from typing import Annotated

import msgspec

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

Quantity = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
Priority = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]

__all__ = ["INT32_MAX", "INT32_MIN", "INT64_MAX", "Count", "Priority", "Quantity"]
