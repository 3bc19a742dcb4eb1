"""``wm-signals mcp``: serve working memory to MCP clients (stdio or streamable HTTP).

Takes the common Redis flags (URL, TLS, Sentinel, Cluster, namespace, ACL user in the
URL) and the durability flags of writes. The server itself is :mod:`workers.mcp`; the
SDK is the ``mcp`` extra, imported only when the command runs.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from signals.errors import InvalidInputError, MissingDependencyError
from workers.cli.args import add_common_args, add_durability_args, int_flag, read_text, run_async, settings_from
from workers.runtime.connect import open_client
from workers.runtime.logging import configure_logging

__all__ = ("register",)


def _schema(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    import msgspec  # noqa: PLC0415

    from signals.core.codec import decode_json  # noqa: PLC0415

    try:
        schema = decode_json(read_text(path, "--schema"))
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"--schema {path}: not valid JSON: {e}") from e
    if not isinstance(schema, dict):
        raise InvalidInputError(f"--schema {path}: a JSON Schema must be an object")
    return schema


def _cmd_mcp(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        raise MissingDependencyError("wm-signals mcp needs the MCP SDK: pip install 'wm-signals[mcp]'")
    from workers.mcp.run import McpConfig, run_mcp  # noqa: PLC0415 - the mcp extra

    settings = settings_from(args)
    configure_logging(settings.log_format, settings.log_level, force=True)  # a long-running server: its own level
    config = McpConfig(transport=args.transport, bind=args.bind, port=args.port, resource=args.resource,
                       thread=args.thread, tokens_file=args.tokens_file, schema=_schema(args.schema),
                       max_bytes=args.max_bytes)
    config.check()

    async def main() -> int:
        key = settings.signing_key_bytes()
        from signals.core.signing import Signer  # noqa: PLC0415

        async with open_client(settings, bounded=True) as redis:  # one reply at most max_reply_bytes
            await run_mcp(redis, settings.keys(), config, cluster=settings.cluster,
                          signer=Signer(key) if key else None, durability=settings.durability())
        return 0

    return run_async(main)




def register(sub: Any) -> None:
    """Add ``mcp`` to the CLI's sub-parsers."""
    mcp = sub.add_parser("mcp", help="serve working memory to MCP clients (stdio, or streamable HTTP with tokens)")
    add_common_args(mcp)
    add_durability_args(mcp)
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio: one resource, for a desktop client (default); http: streamable HTTP, a bearer "
                          "token per resource")
    mcp.add_argument("--bind", default="127.0.0.1", metavar="ADDR", help="HTTP address (default 127.0.0.1)")
    mcp.add_argument("--port", type=int_flag("--port", "a TCP port", 1, 65535), default=8808,
                     help="HTTP port (default 8808)")
    mcp.add_argument("--resource", help="stdio: the resource (user) id served")
    mcp.add_argument("--thread", help="stdio: the thread the tools address when they name none")
    mcp.add_argument("--tokens-file", metavar="PATH",
                     help="http: JSON object, bearer token (or sha256:<hex> of it) -> resource id; read again when "
                          "it changes (a missing or invalid file refuses every token)")
    mcp.add_argument("--schema", metavar="PATH",
                     help="JSON Schema file: working memory is JSON, merged and validated (default: Markdown)")
    mcp.add_argument("--max-bytes", type=int_flag("--max-bytes", "a number of bytes", 1, 1 << 31), metavar="N",
                     help="largest document accepted (default 65536)")
    mcp.set_defaults(handler=_cmd_mcp)
