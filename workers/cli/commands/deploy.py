"""Deployment commands of ``wm-signals``: ``deploy acl`` (the ACL users of a namespace) and
``deploy kubernetes`` (the manifests of a worker deployment).

``wm-signals deploy acl --namespace NS [--password ROLE=SECRET ...] [--cluster] [-o FILE]``
renders :func:`signals.streams.acl.acl_file` to stdout (or FILE). Roles without a given password
get a random one (``secrets.token_urlsafe``), printed to stderr as ``USER PASSWORD``
lines for the operator to store; the file itself holds only SHA-256 hashes. It talks to
no Redis: load the file with ``aclfile`` in redis.conf (or ``ACL LOAD``).

``wm-signals deploy functions --redis-url URL`` loads the project's Redis Functions library
(:mod:`signals.streams.scripts`) as the user of the URL (the operator or the worker: no
other role may); workers load it by themselves at their start.

``wm-signals deploy kubernetes [--namespace NS] [--partitions N] [--k8s-namespace K] [-o DIR] ...``
prints the manifests of :mod:`workers.deploy.kubernetes` as one YAML stream, or writes them into
DIR, one file per concern (:data:`workers.deploy.kubernetes.FILES`); ``deploy/kubernetes/`` holds
its output for the defaults. It talks to no cluster and writes no secret.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from pathlib import Path
from typing import Any

from signals.errors import InvalidInputError
from signals.streams.acl import ROLES, acl_file, user_name
from signals.streams.keys import Keys
from signals.streams.scripts import ensure_loaded, library_name
from workers.cli.args import add_common_args, run_async, settings_from
from workers.deploy import kubernetes
from workers.runtime.connect import open_client

__all__ = ("parse_passwords", "register")

#: RFC 3986's unreserved characters: a password of these goes into a URL unescaped.
_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def parse_passwords(keys: Keys, values: list[str]) -> dict[str, str]:
    """``ROLE=SECRET`` flags as ``{role: secret}``; ROLE is a role or its user name.

    Raises:
        InvalidInputError: no ``=``, an empty secret, one that is not URL-safe, an unknown
            or repeated role.
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
        if not _URL_SAFE.fullmatch(secret):  # it goes into redis:// URLs as it is (docs/operations/redis.md)
            raise InvalidInputError(f"--password: the {role} password must be URL-safe (letters, digits, '-', "
                                    "'.', '_', '~'): it goes into redis:// URLs as it is")
        out[role] = secret
    return out


def _cmd_acl(args: argparse.Namespace) -> int:
    keys = Keys(args.namespace)
    passwords = parse_passwords(keys, args.password)
    generated = {role: secrets.token_urlsafe(24) for role in ROLES if role not in passwords}
    text = acl_file(keys, {**passwords, **generated}, cluster=args.cluster)
    if args.output:
        try:
            Path(args.output).write_text(text, "utf-8")
        except OSError as e:  # a path it cannot write is bad input, named as export names it
            raise InvalidInputError(f"-o {args.output}: {e.strerror or e}") from e
    else:
        sys.stdout.write(text)
    for role, secret in generated.items():
        sys.stderr.write(f"{user_name(keys, role)} {secret}\n")
    return 0


def _cmd_kubernetes(args: argparse.Namespace) -> int:
    options = kubernetes.Options(
        Keys(args.namespace, args.partitions), name=args.name, k8s_namespace=args.k8s_namespace, image=args.image,
        redis_address=args.redis_address, cluster=args.cluster, min_replicas=args.min_replicas,
        max_replicas=args.max_replicas, lag_per_replica=args.lag_per_replica)
    files = kubernetes.manifests(options)
    if not args.output:
        sys.stdout.write(kubernetes.render(options, [obj for objects in files.values() for obj in objects]))
        return 0
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"-o {args.output}: exists and is not a directory")
    texts = {name: kubernetes.render(options, objects) for name, objects in files.items()}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out / name).write_text(text, "utf-8")
    except OSError as e:
        raise InvalidInputError(f"-o {args.output}: {e.strerror or e}") from e
    return 0


def _cmd_functions(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    async def main() -> int:
        async with open_client(settings) as redis:
            loaded = await ensure_loaded(redis)
        print(f"{library_name()}: {'loaded' if loaded else 'already loaded'}")
        return 0

    return run_async(main)


def _register_kubernetes(what: Any) -> None:
    defaults = kubernetes.Options(Keys())
    k8s = what.add_parser(
        "kubernetes", help="Kubernetes manifests of a worker deployment, KEDA autoscaling included",
        description="Print (or write into DIR) the manifests of a worker deployment: Secret templates for "
                    "the worker's and the scaler's ACL users, the worker Deployment, a PodDisruptionBudget, a "
                    "metrics Service, and KEDA's TriggerAuthentication and ScaledObject (one lag trigger per "
                    "partition, summed). Stream and user names come from the key layout.")
    k8s.add_argument("--namespace", default=defaults.keys.namespace,
                     help=f"the wm-signals namespace (key prefix; default {defaults.keys.namespace})")
    k8s.add_argument("--partitions", type=int, default=defaults.keys.partitions,
                     help=f"the deployment's partition count (default {defaults.keys.partitions})")
    k8s.add_argument("--k8s-namespace", help="metadata.namespace of every object (default: none, kubectl -n decides)")
    k8s.add_argument("--name", default=defaults.name, help=f"prefix of the objects' names (default {defaults.name})")
    k8s.add_argument("--image", default=defaults.image, help=f"the worker image (default {defaults.image})")
    k8s.add_argument("--redis-address", default=defaults.redis_address, metavar="HOST:PORT",
                     help=f"Redis as the pods reach it (default {defaults.redis_address}; "
                          "with --cluster the nodes, comma-separated)")
    k8s.add_argument("--cluster", action="store_true", help="Redis Cluster (KEDA's redis-cluster-streams trigger)")
    k8s.add_argument("--min-replicas", type=int, default=defaults.min_replicas,
                     help=f"fewest workers (default {defaults.min_replicas}; 0 scales to zero)")
    k8s.add_argument("--max-replicas", type=int, default=defaults.max_replicas,
                     help=f"most workers (default {defaults.max_replicas})")
    k8s.add_argument("--lag-per-replica", type=int, default=defaults.lag_per_replica,
                     help="undelivered entries (summed over the partitions) one worker should carry: the "
                          f"autoscaler's target (default {defaults.lag_per_replica})")
    k8s.add_argument("-o", "--output", metavar="DIR", help="write one file per concern into DIR (default stdout)")
    k8s.set_defaults(handler=_cmd_kubernetes)


def register(sub: Any) -> None:
    """Add ``deploy acl``, ``deploy functions`` and ``deploy kubernetes`` to the CLI's sub-parsers."""
    deploy = sub.add_parser("deploy", help="generate deployment files: ACL users, Kubernetes manifests")
    what = deploy.add_subparsers(dest="deploy_command", required=True, metavar="WHAT")
    acl = what.add_parser(
        "acl", help="least-privilege Redis ACL users of a namespace (worker, writer, reader, agent, operator, scaler)",
        description="Print (or write) a Redis 7 ACL file. Roles without --password get a random password, "
                    "printed to stderr as 'USER PASSWORD'; the file holds only SHA-256 hashes.")
    acl.add_argument("--namespace", required=True, help="the namespace (key prefix) the users may touch")
    acl.add_argument("--password", action="append", default=[], metavar="ROLE=SECRET",
                     help=f"a role's password (repeatable); roles: {', '.join(ROLES)}")
    acl.add_argument("--cluster", action="store_true",
                     help="also allow what a Redis Cluster client needs (CLUSTER SLOTS, COMMAND, ASKING)")
    acl.add_argument("-o", "--output", metavar="FILE", help="write the file here (default stdout)")
    acl.set_defaults(handler=_cmd_acl)
    functions = what.add_parser(
        "functions", help="load the project's Redis Functions library (as the operator or the worker)",
        description="Load the wm-signals functions library unless the server has it (workers do so at their "
                    "start): after FUNCTION FLUSH, or before starting writers of a new release.")
    add_common_args(functions)
    functions.set_defaults(handler=_cmd_functions)
    _register_kubernetes(what)
