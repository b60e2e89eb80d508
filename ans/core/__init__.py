"""The ANS core: what every surface (AGTP, profile binding, HAIDIP, MCP) calls.

* :mod:`.context` — the injected parts (config, store, keys, audit, clock).
* :mod:`.live_index` — the in-memory registry, its locks and caches.
* :mod:`.loader` — start-up from the store or a snapshot; writing snapshots.
* :mod:`.discovery` — DISCOVER: admit, match locally, route, federate, finish, sign.
* :mod:`.registrar` — ACTIVATE (one and bulk) behind one admissibility check.
* :mod:`.lifecycle` — governance-signed SUSPEND / REINSTATE / REVOKE / DEPRECATE.
* :mod:`.freshness` — the index-freshness writes driven by :mod:`ans.freshness_runner`.
* :mod:`.describe` — DESCRIBE, this ANS's own manifest and JWKS.

:class:`ans.service.AnsService` wires them together for the existing callers.
"""
