"""``ans governance keygen`` and ``sign-manifest``: act as a governance
platform (generate an ES256 key and its JWKS; sign a manifest)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import _read_json, _read_key


def cmd_keygen(args: argparse.Namespace) -> int:
    from ans.governance.keys import SigningKey

    if args.key.exists():
        print(f"ans: {args.key} exists; refusing to overwrite a key", file=sys.stderr)
        return 2
    key = SigningKey.generate(args.kid)
    key.save(args.key)
    jwks_path = args.jwks or args.key.with_suffix(".jwks.json")
    jwks_path.write_text(json.dumps({"keys": [key.public.jwk()]}, indent=2) + "\n")
    print(f"kid {key.kid}\nprivate key {args.key} (0600)\npublic JWKS {jwks_path}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    from ans.governance.signing import sign_document

    key = _read_key(args.key, args.kid)
    doc = _read_json(args.manifest)
    if isinstance(doc, dict) and isinstance(doc.get("manifest"), dict):
        out: Any = {**doc, "manifest": sign_document(doc["manifest"], key, "signature")}
    elif isinstance(doc, dict):
        out = sign_document(doc, key, "signature")
    else:
        print("ans: the manifest file must hold a JSON object", file=sys.stderr)
        return 2
    text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
