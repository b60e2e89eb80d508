"""ANS, the AGTP Agent Name Service: the server that wires protocol,
governance and federation together — configuration, the registry store,
the capability index, ranking, the ASGI app served by hypercorn, and the
``ans`` command line.
"""

__version__ = "0.1.0"
