"""Surfaces: translations of messages to and from the one core (DESIGN.md,
"One core, many surfaces"). A surface owns its wire format and error model;
it never keeps a second index or a second policy."""
