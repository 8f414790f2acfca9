"""Generates ``libs/gangpreempt/manifests/apifields.json`` from the kubernetes client's
models: ``python -m tests.apifields`` (the core may not import the client)."""

from __future__ import annotations

import json
import re

from gangpreempt.manifests.apifields import CORE_ROOTS, DATA, FieldTypes


def generate() -> dict[str, FieldTypes]:
    """The core types as the kubernetes client's models declare them (status is not
    looked into: the API server writes it)."""
    from kubernetes_asyncio.client import models  # half a second: only here

    out: dict[str, FieldTypes] = {}

    def type_of(text: str) -> str | None:
        listed = re.fullmatch(r"list\[(.+)\]", text)
        if listed:
            return type_of(listed.group(1))
        mapped = re.fullmatch(r"dict\(str, (.+)\)", text)
        if mapped:
            inner = type_of(mapped.group(1))
            return None if inner is None else "*" + inner
        return text if hasattr(models, text) else None

    def visit(name: str) -> None:
        if name in out:
            return
        model = getattr(models, name)
        out[name] = {}
        fields: FieldTypes = {}
        for attr, text in model.openapi_types.items():
            json_name = model.attribute_map[attr]
            child = None if json_name == "status" else type_of(text)
            fields[json_name] = child
            if child is not None:
                visit(child.lstrip("*"))
        out[name] = fields

    for root in CORE_ROOTS:
        visit(root)
    return dict(sorted(out.items()))


if __name__ == "__main__":
    DATA.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    DATA.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
