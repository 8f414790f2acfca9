"""``gangpreempt rbac``: print (or write) the actuator's RBAC objects for a configuration,
generated from the access table of the kubernetes sink (``services/kube/rbac.py``). The
committed ``deploy/k8s/actuator-rbac.yaml`` and the components' ``rbac.yaml`` are its
output (a test checks they are up to date)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gangpreempt.config import load_settings
from gangpreempt.errors import InvalidInput

EXIT_INVALID = 2
FEATURES = ("base", "eviction", "delete", "soft-eviction", "placement")


@click.command(
    "rbac",
    epilog="\b\nExamples:\n"
    "  gangpreempt rbac                                 # as GANGPREEMPT_* configure it\n"
    "  gangpreempt rbac --pod-eviction delete --mode act --namespaces team-a,team-b\n"
    "  gangpreempt rbac --mode shadow -o deploy/k8s/actuator-rbac.yaml\n"
    "  gangpreempt rbac --feature placement -o deploy/k8s/components/act/rbac.yaml",
)
@click.option(
    "--pod-eviction",
    type=click.Choice(["eviction", "delete", "soft-eviction"]),
    help="How victim pods go [GANGPREEMPT_POD_EVICTION].",
)
@click.option(
    "--mode",
    type=click.Choice(["act", "shadow"]),
    help="act: the actuator also places pods (a patch); shadow: no placement [GANGPREEMPT_MODE].",
)
@click.option(
    "--namespaces",
    default="",
    help="Comma-separated namespaces gangpreempt manages: namespaced grants by a RoleBinding "
    "in each (default: one ClusterRoleBinding).",
)
@click.option(
    "--feature",
    type=click.Choice(FEATURES),
    help="Only the roles and bindings this feature adds (what a kustomize component holds).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of printing.",
)
def rbac_command(
    pod_eviction: str | None,
    mode: str | None,
    namespaces: str,
    feature: str | None,
    output: Path | None,
) -> None:
    """Print the actuator's ClusterRoles and bindings: exactly the calls its configuration
    makes (deploy/k8s/actuator-rbac.yaml, deploy/k8s/components/*/rbac.yaml)."""
    from services.kube.rbac import actuator_documents, feature_documents, header, render

    overrides = {k: v for k, v in (("pod_eviction", pod_eviction), ("mode", mode)) if v}
    try:
        settings = load_settings(overrides)
    except (InvalidInput, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    listed = [ns.strip() for ns in namespaces.split(",") if ns.strip()]
    if feature is not None:
        docs = feature_documents(feature, listed)
        what = f"what {feature} adds"
        command = f"gangpreempt rbac --feature {feature}"
    else:
        act = settings.mode == "act"
        docs = actuator_documents(settings.pod_eviction, act, listed)
        what = f"pod eviction {settings.pod_eviction}, mode {settings.mode}"
        command = f"gangpreempt rbac --pod-eviction {settings.pod_eviction} --mode {settings.mode}"
    if listed:
        command += f" --namespaces {','.join(listed)}"
    text = render(docs, header(command, what))
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)


__all__ = ["rbac_command"]
