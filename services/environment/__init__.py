"""The environment service: sandboxed workspaces and the agent's tools."""
