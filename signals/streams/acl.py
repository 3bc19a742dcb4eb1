"""Least-privilege Redis ACL users for one namespace, generated from the key layout.

What it does: a table of roles (worker, writer, reader, agent, operator, scaler) says, per key
kind of :class:`~signals.streams.keys.Keys`, which commands a role may run and whether it needs
read or read-write access; :func:`acl_file` renders the table as a Redis 7 ACL file for
one namespace, with key patterns from :meth:`Keys.pattern` (so patterns cannot drift
from keys) and passwords stored only as SHA-256 hashes.

What it does not do: no I/O, no Redis import; it neither loads nor checks the file (the
tests run every role against a real redis-server: ``ACL DRYRUN`` over the whole command
table, the pipeline end to end, and the attacks of issue 10).

Scripts: a role runs only the project's own code on the server, as FCALL of the
functions of its library (:mod:`signals.streams.scripts`), which the worker and the
operator load (``FUNCTION LOAD``); no role may EVAL or SCRIPT LOAD, and the operator alone
may SCRIPT KILL and FUNCTION KILL.

Why selectors: functions run their commands under the caller's ACL, so any command a
role's scripts call, the role can also call directly. Each command is therefore allowed
only on the key kinds that need it, with selectors ``(...)``: a writer may
``SET`` idempotency keys but no other key, ``XADD`` its write streams but no signal
stream. Redis 7.0 checks FCALL against read and write permission on every
declared key *within one selector that also allows the command*: the root selector of a
role therefore holds only the connection commands, the scripting commands and read-write
patterns of exactly the kinds its scripts declare (see :data:`SCRIPTS`). A command's keys
must also all match one selector, so the selectors group commands by the set of kinds
they are allowed on (``DEL`` of a signal stream and its snapshot list in one call).

A namespace is the tenant boundary: every pattern is under ``<namespace>:``, never
``~*``, and user names are ``<namespace>-<role>`` (``wm-worker`` for ``wm``) so the
users of several namespaces can share one server. Within a namespace, a role's rights
cover every lane: any agent user can append to any thread's delivery log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from signals.errors import InvalidInputError
from signals.streams.keys import Keys

__all__ = ("BASE_COMMANDS", "CLUSTER_COMMANDS", "DEFAULT_USER", "KILL_COMMANDS", "KINDS", "LOAD_COMMANDS", "ROLES",
           "SCRIPTS", "SCRIPT_COMMANDS", "Grant", "Role",
           "Script", "acl_file", "acl_users", "allowed_commands", "grants_of", "user_name")

Access = Literal["R", "RW"]

#: Key kinds in rendering order (the order of :class:`~signals.streams.keys.Keys`).
KINDS = ("doc", "trk", "sig", "snaps", "idem", "thread", "dlv", "writes", "dlq", "fails", "lanes", "config", "hb")

#: What every user may run: connect (redis-py sends AUTH, or HELLO with RESP3; SETNAME
#: and SELECT when configured), ping, and read server info. redis-py also sends
#: ``CLIENT SETINFO``, which Redis 7.0 does not know (the rule would not load) and whose
#: refusal on 7.2+ redis-py ignores.
BASE_COMMANDS = ("ping", "hello", "auth", "client|setname", "select", "info")

#: What redis-py's RedisCluster adds: the slot map (CLUSTER SLOTS), the command table and
#: key positions (COMMAND, COMMAND GETKEYS), and ASKING while a slot migrates.
CLUSTER_COMMANDS = ("cluster|slots", "command", "asking")

#: The one scripting command of a role that runs the project's scripts: FCALL of the
#: functions of the project's library (:mod:`signals.streams.scripts`). No role that
#: faces callers may EVAL, EVALSHA or load code (SCRIPT LOAD, FUNCTION LOAD): its
#: scripts are the project's, loaded by a worker or an operator (:data:`LOAD_COMMANDS`).
SCRIPT_COMMANDS = ("fcall",)

#: Loading the project's library: the worker (at its start, and after a flush) and the operator.
LOAD_COMMANDS = ("function|load",)

#: Ending a script or function past the busy threshold (every client gets BUSY until then):
#: the operator only.
KILL_COMMANDS = ("script|kill", "function|kill")


@dataclass(frozen=True, slots=True)
class Grant:
    """Commands a role may run on the keys of one kind, with read or read-write access."""

    access: Access
    commands: tuple[str, ...]

    def __or__(self, other: Grant) -> Grant:
        access: Access = "RW" if "RW" in (self.access, other.access) else "R"
        return Grant(access, tuple(dict.fromkeys((*self.commands, *other.commands))))


@dataclass(frozen=True, slots=True)
class Script:
    """A bundled Lua script: the key kinds it declares, the commands it calls per kind, and
    the read-only commands it runs on keys it does not declare (same slot, given by name
    in its arguments: declaring them would need write access to them).

    Keep in step with ``signals/lua/<name>.lua`` (a test compares the calls).
    """

    declares: tuple[str, ...]
    calls: Mapping[str, tuple[str, ...]]
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


#: The scripts, by file name.
SCRIPTS: Mapping[str, Script] = {
    # KEYS: doc, writes, idem (or doc), thread (or doc), lanes
    "write": Script(("doc", "writes", "idem", "thread", "lanes"), {
        "doc": ("hmget", "hset", "hdel"), "writes": ("xadd",), "idem": ("get", "set"),
        "thread": ("hget", "hset"), "lanes": ("type", "sadd")}),
    # KEYS: thread
    "thread": Script(("thread",), {"thread": ("hget", "hset")}),
    # KEYS: writes, then per lane: trk, sig, snaps (type-checked; mistyped ones deleted;
    # retention reads a listed snapshot's entry to learn its version); steady-state checks
    # read the document hash and thread owner, and walk the chain
    "commit": Script(("writes", "trk", "sig", "snaps"), {
        "writes": ("xack", "xrange", "type"), "trk": ("type", "del", "hmget", "hset"),
        "sig": ("type", "del", "xrevrange", "xadd", "xtrim", "xrange"),
        "snaps": ("type", "del", "rpush", "lrange", "ltrim")},
        reads={"doc": ("hmget",), "thread": ("hget",)}),
    # KEYS: per lane: trk, sig, snaps (an idle lane trimmed to one snapshot, see workers.engine.compaction)
    "compact": Script(("trk", "sig", "snaps"), {
        "trk": ("type", "hmget", "hset"),
        "sig": ("type", "xrevrange", "xrange", "xlen", "del", "xadd", "dump", "restore"),
        "snaps": ("type", "del")}),
    # KEYS: writes (read-only walk of a lane's event chain; a backlog's stretch read in chunks first)
    "chain": Script(("writes",), {"writes": ("xrange", "xrevrange")}),
    # KEYS: writes, dlq, fails
    "dead_letter": Script(("writes", "dlq", "fails"), {
        "writes": ("xack", "type"), "dlq": ("xadd",), "fails": ("hdel",)}),
    # KEYS: dlq, writes
    "requeue": Script(("dlq", "writes"), {"dlq": ("xdel",), "writes": ("xadd", "xlen")}),
    # KEYS: writes (a graceful stop leaves the group where nothing is pending, in one step)
    "leave": Script(("writes",), {"writes": ("xpending", "xgroup|delconsumer")}),
    # KEYS: writes (a dead consumer's entries claimed by id; read by id within the reply bound)
    "claim": Script(("writes",), {"writes": ("xautoclaim",)}),
}


@dataclass(frozen=True, slots=True)
class Role:
    """A user: the scripts it runs, what it runs directly per key kind, and keyless commands."""

    scripts: tuple[str, ...] = ()
    grants: Mapping[str, Grant] = field(default_factory=dict)
    keyless: tuple[str, ...] = ()

    def __or__(self, other: Role) -> Role:
        """The union of two roles (an agent loop that also writes: writer | reader)."""
        return Role(tuple(dict.fromkeys((*self.scripts, *other.scripts))), _merge(self.grants, other.grants),
                    tuple(dict.fromkeys((*self.keyless, *other.keyless))))


def _merge(*tables: Mapping[str, Grant]) -> dict[str, Grant]:
    out: dict[str, Grant] = {}
    for table in tables:
        for kind, grant in table.items():
            out[kind] = out[kind] | grant if kind in out else grant
    return out


def R(*commands: str) -> Grant:
    """Read-only access to a kind's keys."""
    return Grant("R", commands)


def RW(*commands: str) -> Grant:
    """Read-write access to a kind's keys."""
    return Grant("RW", commands)


_SIGNAL_READS = {"sig": R("xread", "xrange", "xrevrange", "xlen"), "snaps": R("lindex", "lrange"),
                 # a subscriber's one look at whether a worker serves its lane (signals.streams.served)
                 "writes": R("xinfo|consumers")}

_WORKER = Role(("commit", "compact", "chain", "dead_letter", "leave", "claim"), {
    # consumer group on the write streams (leaving it at a graceful stop); trimming below the
    # oldest pending entry; TYPE: a partition whose key holds another type is skipped;
    # XSETID and XGROUP SETID: a stream run out of ids (a hand-made largest id) restarts;
    # XRANGE and XPENDING: entries claimed by id, and one over the reply bound found by its id
    "writes": RW("xreadgroup", "xack", "xautoclaim", "xgroup|create", "xgroup|delconsumer", "xpending",
                 "xinfo|groups", "xtrim", "type", "xsetid", "xgroup|setid", "xrange"),
    # each batch reads its lanes' document heads (version, eid, format) and (cache misses)
    # tracking; a whole document and its thread owner only when the text is needed
    "doc": R("hmget"),
    "thread": R("hget"),
    "trk": RW("hmget"),
    # the tracking cache rebuilds a delta base from the last signal or the last snapshot on;
    # compaction reads the lanes' stream lengths; reconciliation each lane's last entry (is
    # it the tracking's tail?)
    "sig": R("xrevrange", "xrange", "xlen"),
    # compaction sweeps the lane registry, and so does reconciliation (workers.engine.reconcile)
    "lanes": R("sscan"),
    "snaps": R("lindex"),
    "fails": RW("hincrby"),
    # the namespace's partition count: recorded once, then checked
    "config": RW("hsetnx", "hget"),
    # the monitor task: the dead-letter length gauge, the heartbeat (worker --check reads it)
    "dlq": R("xlen"),
    "hb": RW("set", "del", "get", "pttl"),
}, keyless=LOAD_COMMANDS)

_WRITER = Role(("write", "thread"), {
    "doc": R("hmget", "hget"),
    "thread": R("hget"),
    **_SIGNAL_READS,
    "config": RW("hsetnx", "hget"),
    # durable writes (signals.streams.durability): WAIT after the write script, and a retry
    # that finds its idempotency key rewrites it (SET XX KEEPTTL, the script's own SET) first
}, keyless=("wait",))

_READER = Role((), {
    **_SIGNAL_READS,
    "doc": R("hmget", "hget"),
    "thread": R("hget"),
    "dlv": RW("xadd", "xrange", "xrevrange"),
    "config": R("hget"),
})

_OPERATOR = Role(("requeue",), {
    # inspect: lengths, groups, consumers, pending; dlq list/show/drop; read-only elsewhere (wm-signals ui too)
    "writes": R("xlen", "xrange", "xpending", "xinfo|groups", "xinfo|consumers", "xinfo|stream"),
    "dlq": RW("xrange", "xrevrange", "xlen", "xdel"),
    "lanes": R("scard", "sscan", "smembers"),
    "doc": R("hget", "hmget"),
    "trk": R("hget", "hmget"),
    # XREAD: wm-signals ui's live lane and thread pages wait on these streams for new entries
    "sig": R("xrange", "xrevrange", "xlen", "xread"),
    "snaps": R("lindex", "lrange", "llen"),
    "thread": R("hget"),
    "dlv": R("xrange", "xrevrange", "xlen", "xread", "xinfo|stream"),  # replay --deliveries: entries ever added
    "fails": R("hget", "hlen"),
    "config": R("hget"),
    "hb": R("get", "pttl"),  # worker --check, as a probe
}, keyless=(*LOAD_COMMANDS, *KILL_COMMANDS))

#: An autoscaler reading the consumer group's lag (KEDA's ``redis-streams`` trigger in lag
#: mode runs ``XINFO GROUPS <stream>`` per partition, nothing else): the operator role could,
#: but it may also requeue and drop dead letters, too much for a credential held by the
#: cluster's autoscaler.
_SCALER = Role((), {"writes": R("xinfo|groups")})

#: The roles, by name (user ``<namespace>-<name>``).
ROLES: Mapping[str, Role] = {
    "worker": _WORKER,
    "writer": _WRITER,
    "reader": _READER,
    "agent": _WRITER | _READER,
    "operator": _OPERATOR,
    "scaler": _SCALER,
}


def user_name(keys: Keys, role: str) -> str:
    """The ACL user of a role in a namespace: ``<namespace>-<role>``."""
    return f"{keys.namespace}-{role}"


def grants_of(role: Role) -> dict[str, Grant]:
    """Everything a role may run per key kind: its own grants plus its scripts' calls.

    A kind a script declares gets read-write access (EVAL needs it on declared keys); the
    keys it only reads, undeclared, read-only access.
    """
    from_scripts = [{kind: RW(*cmds) for kind, cmds in SCRIPTS[name].calls.items()} for name in role.scripts]
    reads = [{kind: R(*cmds) for kind, cmds in SCRIPTS[name].reads.items()} for name in role.scripts]
    declared = {kind: RW() for name in role.scripts for kind in SCRIPTS[name].declares}
    return _merge(role.grants, *from_scripts, *reads, declared)


def allowed_commands(role: Role, *, cluster: bool = False) -> frozenset[str]:
    """Every command (``name`` or ``container|sub``) a role may run on some key, or keyless."""
    own = {cmd for grant in grants_of(role).values() for cmd in grant.commands}
    base = (*BASE_COMMANDS, *(CLUSTER_COMMANDS if cluster else ()), *(SCRIPT_COMMANDS if role.scripts else ()),
            *role.keyless)
    return frozenset((*base, *own))


def _pattern(keys: Keys, kind: str, access: Access) -> str:
    return ("~" if access == "RW" else "%R~") + keys.pattern(kind)


def _commands(names: Iterable[str]) -> list[str]:
    return ["+" + name for name in names]


def _selectors(grants: Mapping[str, Grant]) -> list[tuple[tuple[tuple[str, Access], ...], list[str]]]:
    """Group commands by the key kinds (and access) they are allowed on: one selector each.

    Redis checks all keys of one command against one selector, so a command allowed on
    several kinds must find them together (``DEL sig snaps`` in the commit script); and a
    selector must not allow a command on a kind the table does not give it.
    """
    where: dict[str, list[tuple[str, Access]]] = {}
    for kind in KINDS:
        grant = grants.get(kind)
        for command in grant.commands if grant else ():
            where.setdefault(command, []).append((kind, grant.access if grant else "R"))
    groups: dict[tuple[tuple[str, Access], ...], list[str]] = {}
    for command, kinds in where.items():
        groups.setdefault(tuple(kinds), []).append(command)
    return list(groups.items())


def _hash(role: str, password: object) -> str:
    if not isinstance(password, str) or not password:
        raise InvalidInputError(f"the password of role {role!r} must be a non-empty string")
    try:
        return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"the password of role {role!r} is not valid UTF-8") from e


def acl_users(keys: Keys, passwords: Mapping[str, str], *, cluster: bool = False) -> dict[str, list[str]]:
    """Per user name, its ACL rules in order (one ``ACL SETUSER`` argument each).

    The root selector: connection commands, the scripting commands and a read-write
    pattern per key kind the role's scripts declare. Then one selector per group of
    commands allowed on the same key kinds: the kinds' patterns (``~`` read-write,
    ``%R~`` read-only) and the commands.

    Args:
        keys: the namespace (the partition count does not matter).
        passwords: a password per role name in :data:`ROLES`; stored only as SHA-256.
        cluster: also allow what redis-py's cluster client needs (:data:`CLUSTER_COMMANDS`).

    Raises:
        InvalidInputError: a role without a password, an unknown role, an empty password.
    """
    unknown = sorted(set(passwords) - set(ROLES))
    if unknown:
        raise InvalidInputError(f"unknown role(s) {', '.join(unknown)}: the roles are {', '.join(ROLES)}")
    missing = [role for role in ROLES if role not in passwords]
    if missing:
        raise InvalidInputError(f"no password for role(s) {', '.join(missing)}")
    users: dict[str, list[str]] = {}
    for name, role in ROLES.items():
        rules = ["reset", "on", _hash(name, passwords[name]), "resetchannels", "-@all"]
        rules += _commands(BASE_COMMANDS)
        rules += _commands(role.keyless)
        if cluster:
            rules += _commands(CLUSTER_COMMANDS)
        if role.scripts:
            rules += _commands(SCRIPT_COMMANDS)
            declared = {kind for script in role.scripts for kind in SCRIPTS[script].declares}
            rules += [_pattern(keys, kind, "RW") for kind in KINDS if kind in declared]
        for kinds, commands in _selectors(grants_of(role)):
            rules.append("(" + " ".join([*(_pattern(keys, k, a) for k, a in kinds), *_commands(commands)]) + ")")
        users[user_name(keys, name)] = rules
    return users


#: The default user: off, so that no connection is ever the default user (every client
#: authenticates as a role), and with every permission. Redis replays an append-only file
#: as the default user, and checks a transaction's commands against it at EXEC: a
#: default user without permissions made Redis 7.0 drop every script's and function's
#: writes (replicated as MULTI/EXEC) when it loaded the AOF after a restart; nothing was
#: restored. Being off, it authenticates no one (``AUTH default`` is refused).
DEFAULT_USER = "user default off resetpass ~* &* +@all"


def acl_file(keys: Keys, passwords: Mapping[str, str], *, cluster: bool = False) -> str:
    """The ACL file of a namespace: the :data:`DEFAULT_USER` line, then one line per role.

    Deterministic for given passwords (the committed ``deploy/users.acl`` is compared
    with it). ACL files hold no comments; ``docs/operations/redis.md`` describes the roles.
    See :func:`acl_users` for the arguments and errors.
    """
    lines = [DEFAULT_USER]
    lines += [" ".join(["user", name, *rules]) for name, rules in acl_users(keys, passwords, cluster=cluster).items()]
    return "\n".join(lines) + "\n"
