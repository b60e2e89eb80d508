"""``ans apikey new``: generate an API key for ``[[auth.api_keys]]``.

Prints the key once (it is not stored anywhere) and the configuration entry
that holds only its SHA-256 (:mod:`ans.governance.apikeys`). A bad scope,
zone or principal is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections.abc import Callable

from ..governance.apikeys import key_hash, new_key, parse_api_keys


def cmd_apikey_new(
    args: argparse.Namespace, random_bytes: Callable[[int], bytes] = secrets.token_bytes
) -> int:
    key = new_key(random_bytes)
    entry: dict[str, object] = {"hash": key_hash(key), "principal_id": args.principal}
    if args.agent_id:
        entry["agent_id"] = args.agent_id
    entry["scopes"] = list(args.scope)
    if args.zone:
        entry["zones"] = list(args.zone)
    parse_api_keys([entry])  # the entry must load as written (ConfigProblem -> exit 2)
    print(f"API key (shown once; give it to {args.principal}, it is not stored): {key}")
    print("Add to the ANS configuration file (only the hash is kept):")
    print("[[auth.api_keys]]")
    for name, value in entry.items():
        print(f"{name} = {json.dumps(value)}")
    return 0
