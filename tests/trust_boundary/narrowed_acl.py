"""A role's generated ACL with one command taken away from one key kind, against a real
redis-server started with the generated ACL file (plus an ``admin`` user that may do
anything): the operator who loaded an old ACL file missing one selector.

Shared by the tests that check a script does everything or nothing visible whichever of
its commands is refused (``test_script_refusals``, ``test_compaction_refusals``,
``test_commit_refusals``), and by those that act as the generated roles
(``test_hostile_roles``, ``tests/e2e/test_ui_operator_role.py``).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from redis.asyncio import Redis

from signals.streams.acl import ROLES, acl_file, acl_users
from signals.streams.keys import Keys
from workers.runtime.embedded import RedisServer

__all__ = ("ADMIN", "KEYS", "PASSWORDS", "narrow", "narrowed", "restore", "start_server", "state", "url")

PASSWORDS = {role: f"{role}-{secrets.token_hex(4)}" for role in ROLES}
ADMIN = secrets.token_hex(8)
KEYS = Keys("wm", 2)


def start_server(folder: Path, keys: Keys = KEYS) -> RedisServer:
    """A redis-server whose users are the generated ACL's for ``keys`` (namespace ``wm``), plus ``admin``."""
    path = folder / "users.acl"
    path.write_text(acl_file(keys, PASSWORDS) + f"user admin on >{ADMIN} ~* &* +@all\n")
    return RedisServer(extra=["--aclfile", str(path)]).start()


def url(server: RedisServer, role: str) -> str:
    """The URL of ``role``'s user on ``server`` (``admin``: the unrestricted one)."""
    if role == "admin":
        return f"redis://admin:{ADMIN}@127.0.0.1:{server.port}/0"
    return f"redis://wm-{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}/0"


def narrowed(role: str, kind: str, command: str) -> list[str]:
    """The role's generated rules without ``command`` on ``kind``'s keys (still on the other
    kinds its selector named)."""
    pattern = KEYS.pattern(kind)
    out = []
    for rule in acl_users(KEYS, PASSWORDS)[f"wm-{role}"]:
        words = rule.strip("()").split()
        if not rule.startswith("(") or f"+{command}" not in words or not any(w.endswith(pattern) for w in words):
            out.append(rule)
            continue
        patterns = [w for w in words if not w.startswith("+")]
        commands = [w for w in words if w.startswith("+") and w != f"+{command}"]
        if commands:
            out.append("(" + " ".join([*patterns, *commands]) + ")")
        others = [p for p in patterns if not p.endswith(pattern)]
        if others:
            out.append("(" + " ".join([*others, f"+{command}"]) + ")")
    return out


async def narrow(admin: Redis, role: str, kind: str, command: str) -> None:
    """Take ``command`` on ``kind``'s keys away from ``role``'s user."""
    await admin.execute_command("ACL SETUSER", f"wm-{role}", *narrowed(role, kind, command))  # type: ignore[no-untyped-call]


async def restore(admin: Redis, role: str) -> None:
    """Give ``role``'s user its generated rules again."""
    await admin.execute_command("ACL SETUSER", f"wm-{role}", *acl_users(KEYS, PASSWORDS)[f"wm-{role}"])  # type: ignore[no-untyped-call]


async def state(admin: Redis) -> dict[str, object]:
    """Every key of the namespace, with its type and value (``DUMP``; but heartbeats)."""
    keys = sorted(str(k) for k in await admin.keys("wm:*") if ":{hb}:" not in str(k))
    return {key: (await admin.type(key), await admin.dump(key)) for key in keys}
