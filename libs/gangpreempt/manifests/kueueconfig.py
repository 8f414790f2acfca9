"""Kueue's manager ``Configuration``, as the manager reads it: a file
(``config.kueue.x-k8s.io/v1beta1`` or ``v1beta2``, no metadata), or the
``kueue-manager-config`` ConfigMap that holds it under ``controller_manager_config.yaml``
(what ``kubectl get -o yaml`` prints). Only fair sharing and the PriorityBoost feature gate
are read."""

from __future__ import annotations

from typing import Any

import yaml

from gangpreempt.manifests.fields import Fields, describe
from gangpreempt.model.quantity import QuantityError, parse_exact
from gangpreempt.model.queues import (
    FAIR_STRATEGIES,
    LESS_THAN_INITIAL_SHARE,
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    KueueConfiguration,
)

CONFIG_VERSIONS = ("config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2")
CONFIG_MAP_NAME = "kueue-manager-config"
CONFIG_MAP_KEY = "controller_manager_config.yaml"
# The strategy lists Kueue's validation accepts.
VALID_STRATEGIES = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)


PRIORITY_BOOST_GATE = "PriorityBoost"


def configuration(top: Fields, api_version: str) -> KueueConfiguration:
    """v1beta2: fair sharing is on when ``fairSharing`` is present; v1beta1: when
    ``fairSharing.enable`` is true. An empty strategy list is Kueue's default (both).
    ``featureGates`` (a map of gate names to booleans, both versions): the
    ``PriorityBoost`` gate; the others are not read."""
    gates = feature_gates(top)
    boost = gates.get(PRIORITY_BOOST_GATE, False)
    fs = top.map("fairSharing")
    if fs is None:
        return KueueConfiguration(priority_boost=boost)
    enabled = True if api_version.endswith("v1beta2") else fs.flag("enable", False)
    strategies = fs.texts("preemptionStrategies") or FAIR_STRATEGIES
    if strategies not in VALID_STRATEGIES:
        fs.fail(
            "preemptionStrategies",
            "expected one of "
            + "; ".join("[" + ", ".join(v) + "]" for v in VALID_STRATEGIES)
            + f", got [{', '.join(strategies)}]",
        )
    return KueueConfiguration(
        fair_sharing=enabled, preemption_strategies=tuple(strategies), priority_boost=boost
    )


def feature_gates(top: Fields) -> dict[str, bool]:
    """``featureGates``: gate name -> on, each a boolean (as Kueue's Configuration)."""
    gates = top.map("featureGates")
    if gates is None:
        return {}
    out: dict[str, bool] = {}
    for name, value in gates.data.items():
        if not isinstance(value, bool):
            gates.fail(str(name), f"expected true or false, got {describe(value)}")
        out[str(name)] = value
    return out


def from_config_map(data: Fields) -> tuple[Any, str] | None:
    """The Configuration document a ``kueue-manager-config`` ConfigMap holds, parsed, and
    its apiVersion; None when the key is absent."""
    text = data.raw(CONFIG_MAP_KEY)
    if text is None:
        return None
    if not isinstance(text, str):
        data.fail(CONFIG_MAP_KEY, f"expected a string, got {describe(text)}")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} of the value)" if mark is not None else ""
        data.fail(CONFIG_MAP_KEY, f"invalid YAML{where}: {getattr(exc, 'problem', exc)}")
    if not isinstance(doc, dict):
        data.fail(CONFIG_MAP_KEY, f"expected a Kueue Configuration, got {describe(doc)}")
    api_version = doc.get("apiVersion")
    if api_version not in CONFIG_VERSIONS or doc.get("kind") != "Configuration":
        data.fail(
            CONFIG_MAP_KEY,
            f"expected a Kueue Configuration ({' or '.join(CONFIG_VERSIONS)}), got "
            f"{doc.get('kind')!r} of {api_version!r}",
        )
    return doc, str(api_version)


def fair_weight(spec: Fields) -> float:
    """``spec.fairSharing.weight``: a quantity >= 0 (default 1), as a float."""
    fs = spec.map("fairSharing")
    if fs is None or fs.raw("weight") is None:
        return 1.0
    try:
        weight = parse_exact(fs.raw("weight"))
    except QuantityError as exc:
        fs.fail("weight", f"expected a quantity: {exc}")
    if weight < 0:
        fs.fail("weight", f"expected a weight >= 0, got {describe(fs.raw('weight'))}")
    return float(weight)


__all__ = [
    "CONFIG_MAP_KEY",
    "CONFIG_MAP_NAME",
    "CONFIG_VERSIONS",
    "PRIORITY_BOOST_GATE",
    "configuration",
    "fair_weight",
    "feature_gates",
    "from_config_map",
]
