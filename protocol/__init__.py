"""Sans-IO AGTP: message types, header parsing, status codes, Authority-Scope
grammar, strict JSON, RFC 8785 canonical bytes and the HTTP/2 binding, all as
pure functions from bytes/headers to typed objects.

Nothing here knows about keys, stores, sockets or servers. Imported as
``ans.protocol``.
"""
