"""Agents: tools, tool-call parsers, environments and the multi-turn agent loop."""
