"""How the client commands call a server: build the client from the identity
flags, send one request, and print a refusal or an unreachable server."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any


def _ask(
    args: argparse.Namespace, method: str, params: dict[str, Any], *, keys: bool = False
) -> tuple[Any, dict[str, Any] | None] | None:
    """(response, the server's JWKS when ``keys`` and the call succeeded), or
    None after printing why the server could not be asked."""
    import httpx

    from ..client import UnsendableParameters

    try:
        with _client(args) as client:
            resp = client.call(method, params, task_id=_task_id(method))
            jwks = client.jwks() if keys else None
    except UnsendableParameters as exc:
        print(f"ans: {exc}", file=sys.stderr)
        return None
    except (ValueError, httpx.InvalidURL) as exc:
        print(f"ans: --server {args.server}: {exc}", file=sys.stderr)
        return None
    except (httpx.HTTPError, OSError) as exc:  # OSError: the native client
        print(f"ans: cannot reach {args.server}: {exc}", file=sys.stderr)
        return None
    return resp, jwks


def _task_id(method: str) -> str:
    return f"task-cli-{method.lower()}"


def _client(args: argparse.Namespace) -> Any:
    from ..client import connect

    return connect(
        args.server,
        agent_id=args.agent_id,
        principal_id=args.principal_id or getpass.getuser() or "cli-user",
        scope=args.scope,
        timeout=args.timeout,
        verify=args.cacert or True,
        dialect=getattr(args, "dialect", "agtp-02"),
    )


def _print_error(resp: Any) -> int:
    err = resp.error or {}
    print(f"ans: {resp.status} {err.get('code', '?')}: {err.get('message', '')}", file=sys.stderr)
    return 2
