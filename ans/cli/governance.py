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
    from ans.governance.manifest import describe_problems, manifest_problems
    from ans.governance.signing import sign_document

    key = _read_key(args.key, args.kid)
    doc = _read_json(args.manifest)
    wrapped = isinstance(doc, dict) and isinstance(doc.get("manifest"), dict)
    manifest = doc["manifest"] if wrapped else doc
    if not isinstance(manifest, dict):
        print("ans: the manifest file must hold a JSON object", file=sys.stderr)
        return 2
    # Everything ACTIVATE would refuse, named at once, before anything is signed.
    missing, malformed = manifest_problems(manifest, skip=frozenset({"signature"}))
    if missing or malformed:
        print(f"ans: {args.manifest}: {describe_problems(missing, malformed)}", file=sys.stderr)
        return 2
    signed = sign_document(manifest, key, "signature")
    out: Any = {**doc, "manifest": signed} if wrapped else signed
    text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
