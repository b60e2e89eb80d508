#!/bin/sh
# Start one ANS node of deploy/compose.yaml (installed as /usr/local/bin/ans-node-start):
#  - ANS_SHARED_SIGNING_KEY: copy the registry's signing key into the data
#    directory once (every replica signs with it: one registry identity);
#  - ANS_IMPORT: register a catalog first (ans import: verified like ACTIVATE;
#    lines already stored are unchanged, so a restart re-imports nothing);
# then exec ans serve with the node's config (/etc/ans/ans.toml) and "$@".
set -eu
CONFIG=/etc/ans/ans.toml
if [ -n "${ANS_SHARED_SIGNING_KEY:-}" ] && [ ! -e /data/ans-signing-key.pem ]; then
    cp "$ANS_SHARED_SIGNING_KEY" /data/ans-signing-key.pem
    chmod 600 /data/ans-signing-key.pem
fi
if [ -n "${ANS_IMPORT:-}" ]; then
    ans import "$ANS_IMPORT" --config "$CONFIG" \
        || echo "ans-node-start: ans import $ANS_IMPORT accepted nothing (see above); serving anyway" >&2
fi
exec ans serve --config "$CONFIG" "$@"
