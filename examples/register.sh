#!/usr/bin/env bash
# Register examples/agent.json with a running ANS and find it again.
#
#   make demo                      # in another terminal: ANS on 127.0.0.1:4480, data in ans-data/
#   examples/register.sh           # sign with the demo governance key, ACTIVATE, DISCOVER
#
# Environment: ANS (the ans command, default .venv/bin/ans), ANS_SERVER (default
# http://127.0.0.1:4480), GOVERNANCE_KEY (default ans-data/demo-governance-key.pem:
# `ans serve --demo` trusts it; use your own key and --governance-jwks otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
ANS="${ANS:-.venv/bin/ans}"
KEY="${GOVERNANCE_KEY:-ans-data/demo-governance-key.pem}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

"$ANS" governance sign-manifest examples/agent.json --key "$KEY" --out "$OUT/signed.json"
"$ANS" activate "$OUT/signed.json" --scope discovery:register > "$OUT/activated.json"
echo "activated $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("canonical_id") or r)' "$OUT/activated.json")"
"$ANS" discover "read a scanned receipt and return the merchant, date and amount as JSON" --scope "discovery:query zone:finance" --limit 3
