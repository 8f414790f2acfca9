"""Print ``requirements.lock``: every distribution gangpreempt needs at run time (its
dependencies, theirs, and so on; not the dev extra), pinned to the version installed in
this environment. The Dockerfile installs the image with it as constraints, so an image
built today and one built next month hold the same code.

    .venv/bin/python tools/lock_runtime.py > requirements.lock
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_DISTRIBUTION = "gangpreempt"


def runtime_closure(root: str = ROOT_DISTRIBUTION) -> dict[str, str]:
    """Canonical name -> installed version of every distribution ``root`` needs at run
    time (environment markers evaluated here, extras followed where a requirement names
    them)."""
    found: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    while todo:
        name, extras = todo.pop()
        dist = metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(w) for w in wanted):
                continue
            key = canonicalize_name(req.name)
            if key in found:
                continue
            found[key] = metadata.version(req.name)
            todo.append((req.name, frozenset(req.extras)))
    found.pop(canonicalize_name(root), None)
    return found


def main() -> None:
    sys.stdout.write(
        "# gangpreempt's run-time dependencies, pinned (tools/lock_runtime.py writes it;\n"
        "# the Dockerfile installs with it as constraints).\n"
    )
    for name, version in sorted(runtime_closure().items()):
        sys.stdout.write(f"{name}=={version}\n")


if __name__ == "__main__":
    main()
