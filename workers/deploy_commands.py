"""Deployment commands of ``wm-signals``: ``deploy acl`` writes the ACL users of a namespace.

``wm-signals deploy acl --namespace NS [--password ROLE=SECRET ...] [--cluster] [-o FILE]``
renders :func:`signals.streams.acl.acl_file` to stdout (or FILE). Roles without a given password
get a random one (``secrets.token_urlsafe``), printed to stderr as ``USER PASSWORD``
lines for the operator to store; the file itself holds only SHA-256 hashes. It talks to
no Redis: load the file with ``aclfile`` in redis.conf (or ``ACL LOAD``).
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

from signals.errors import InvalidInputError
from signals.streams.acl import ROLES, acl_file, user_name
from signals.streams.keys import Keys

__all__ = ("parse_passwords", "register")


def parse_passwords(keys: Keys, values: list[str]) -> dict[str, str]:
    """``ROLE=SECRET`` flags as ``{role: secret}``; ROLE is a role or its user name.

    Raises:
        InvalidInputError: no ``=``, an empty secret, an unknown or repeated role.
    """
    by_name = {name: name for name in ROLES} | {user_name(keys, name): name for name in ROLES}
    out: dict[str, str] = {}
    for value in values:
        given, sep, secret = value.partition("=")
        if not sep or not secret:
            raise InvalidInputError(f"--password takes ROLE=SECRET with a non-empty secret, not {given!r}=...")
        role = by_name.get(given)
        if role is None:
            raise InvalidInputError(f"--password: unknown role {given!r}: the roles are {', '.join(ROLES)}")
        if role in out:
            raise InvalidInputError(f"--password: role {role!r} given twice")
        out[role] = secret
    return out


def _cmd_acl(args: argparse.Namespace) -> int:
    keys = Keys(args.namespace)
    passwords = parse_passwords(keys, args.password)
    generated = {role: secrets.token_urlsafe(24) for role in ROLES if role not in passwords}
    text = acl_file(keys, {**passwords, **generated}, cluster=args.cluster)
    if args.output:
        Path(args.output).write_text(text, "utf-8")
    else:
        sys.stdout.write(text)
    for role, secret in generated.items():
        sys.stderr.write(f"{user_name(keys, role)} {secret}\n")
    return 0


def register(sub: Any) -> None:
    """Add ``deploy acl`` to the CLI's sub-parsers."""
    deploy = sub.add_parser("deploy", help="generate deployment files: the ACL users of a namespace")
    what = deploy.add_subparsers(dest="deploy_command", required=True, metavar="WHAT")
    acl = what.add_parser(
        "acl", help="least-privilege Redis ACL users of a namespace (worker, writer, reader, agent, operator)",
        description="Print (or write) a Redis 7 ACL file. Roles without --password get a random password, "
                    "printed to stderr as 'USER PASSWORD'; the file holds only SHA-256 hashes.")
    acl.add_argument("--namespace", required=True, help="the namespace (key prefix) the users may touch")
    acl.add_argument("--password", action="append", default=[], metavar="ROLE=SECRET",
                     help=f"a role's password (repeatable); roles: {', '.join(ROLES)}")
    acl.add_argument("--cluster", action="store_true",
                     help="also allow what a Redis Cluster client needs (CLUSTER SLOTS, COMMAND, ASKING)")
    acl.add_argument("-o", "--output", metavar="FILE", help="write the file here (default stdout)")
    acl.set_defaults(handler=_cmd_acl)
