"""``gangpreempt nats-config compose|kubernetes|hash``: print (or write) the nats-server
configuration of a deployment, with a user per service and the permissions the services
need, password hashes read from the environment; or the bcrypt hashes of the passwords
for that environment. The committed ``deploy/nats/nats.conf`` and ``deploy/k8s/nats.conf``
are its output (a test checks they are up to date)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

from gangpreempt.bus import SERVICES, Topology
from gangpreempt.bus.permissions import (
    ADMIN,
    hash_password,
    hash_value,
    hash_variable,
    password_variable,
)
from gangpreempt.bus.serverconfig import ROUTE_USER, compose_config, kubernetes_config
from gangpreempt.config import load_settings
from gangpreempt.errors import InvalidInput

EXIT_INVALID = 2
_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (comments and blank lines skipped), values as written, less
    one pair of matching quotes around them (kubectl takes values verbatim, docker
    compose strips quotes: a password file works for both when it has none)."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise InvalidInput(f"{path}:{number}: expected NAME=value")
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[m.group(1)] = value
    return values


def _quoted(hashed: str, target: str) -> str:
    value = hash_value(hashed)
    # docker compose's .env expands $ in unquoted and double-quoted values, not in single
    return f"'{value}'" if target == "compose" else value


def hash_lines(passwords: dict[str, str], target: str) -> str:
    """``NATS_<USER>_PASSWORD_HASH=...`` for every user, from the file's passwords (on
    Kubernetes also the route user's: the NATS pods log in to each other with it)."""
    lines = []
    routes = (ROUTE_USER,) if target == "kubernetes" else ()
    for user in (ADMIN, *SERVICES, *routes):
        variable = password_variable(user)
        password = passwords.get(variable, "")
        if not password:
            raise InvalidInput(f"no password for {user}: {variable} is missing or empty")
        lines.append(f"{hash_variable(user)}={_quoted(hash_password(password), target)}\n")
    return "".join(lines)


def updated_env_file(text: str, hashes: str) -> str:
    """``text`` (an env file) with its ``..._HASH=`` lines replaced by those of
    ``hashes``, in place, and the ones it lacks appended; every other line as it was."""
    new = dict(line.split("=", 1) for line in hashes.splitlines())
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        name = m.group(1) if m else None
        if name in new:
            out.append(f"{name}={new.pop(name)}")
        else:
            out.append(line)
    out += [f"{name}={value}" for name, value in new.items()]
    return "\n".join(out) + "\n"


def _write(text: str, output: Path | None, secret: bool = False) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    if secret:  # hashes of the passwords: readable by their owner only
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
    else:
        output.write_text(text)


@click.command(
    "nats-config",
    epilog="\b\nExamples:\n"
    "  gangpreempt nats-config compose -o deploy/nats/nats.conf\n"
    "  gangpreempt nats-config kubernetes --replicas 3 -o deploy/k8s/nats.conf\n"
    "  gangpreempt nats-config hash --from-env-file deploy/k8s/nats-passwords.env \\\n"
    "    | kubectl -n gangpreempt create secret generic nats-password-hashes \\\n"
    "        --from-env-file=/dev/stdin\n"
    "  gangpreempt nats-config hash --for compose --from-env-file .env --in-place\n"
    "  printf '%s' \"$PASSWORD\" | gangpreempt nats-config hash",
)
@click.argument("target", type=click.Choice(["compose", "kubernetes", "hash"]))
@click.option("--prefix", help="Subject and stream prefix [GANGPREEMPT_PREFIX].")
@click.option(
    "--replicas",
    type=click.IntRange(1, 5),
    default=3,
    show_default=True,
    help="kubernetes: pods of the NATS StatefulSet.",
)
@click.option(
    "--from-env-file",
    "env_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="hash: the passwords (NATS_<USER>_PASSWORD=...); prints NATS_<USER>_PASSWORD_HASH "
    "lines. Without it, hash reads one password from standard input and prints its hash.",
)
@click.option(
    "--for",
    "hash_for",
    type=click.Choice(["kubernetes", "compose"]),
    default="kubernetes",
    show_default=True,
    help="hash: quote for kubectl's --from-env-file (kept as written) or for docker "
    "compose's .env (in single quotes, or compose would expand the $ in the hash).",
)
@click.option(
    "--in-place",
    is_flag=True,
    help="hash: write the hashes into the --from-env-file file itself (its _HASH lines "
    "replaced, or added), as docker compose's .env holds them beside the passwords.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of printing.",
)
def nats_config_command(
    target: str,
    prefix: str | None,
    replicas: int,
    env_file: Path | None,
    hash_for: str,
    in_place: bool,
    output: Path | None,
) -> None:
    """Print the nats-server configuration for docker compose or Kubernetes
    (deploy/nats/nats.conf, deploy/k8s/nats.conf), or, with hash, the bcrypt hashes of
    the NATS passwords that configuration reads from its environment."""
    try:
        if target == "hash":
            if in_place and (env_file is None or output is not None):
                raise InvalidInput("--in-place writes the --from-env-file file, without -o")
            if env_file is not None:
                text = hash_lines(read_env_file(env_file), hash_for)
                if in_place:
                    text, output = updated_env_file(env_file.read_text(), text), env_file
            else:
                password = sys.stdin.readline().rstrip("\r\n")
                text = _quoted(hash_password(password), hash_for) + "\n"
            _write(text, output, secret=True)
            return
        settings = load_settings({"prefix": prefix} if prefix else {})
        topology = Topology(settings.prefix)
    except (InvalidInput, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    if target == "compose":
        text = compose_config(topology)
    else:
        text = kubernetes_config(topology, replicas)
    _write(text, output)


__all__ = ["hash_lines", "nats_config_command", "read_env_file", "updated_env_file"]
