"""The MCP-orchestrator registry (seed 002): announcements, the trust store,
the REST surface and the TTL sweeper. See docs/mcp-registry.md."""
