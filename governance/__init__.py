"""Trust and policy: scope enforcement (451), trust gates (tier, behavioral
score, zone, org), zone grants (453), manifest verification, signing keys
and JWKS, result-set signing, and the audit log. Imported as
``ans.governance``; depends only on ``ans.protocol``.
"""
