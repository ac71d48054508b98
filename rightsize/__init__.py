"""Rightsize: right-sized, policy-compliant, queue-aware batch jobs for shared HPC centers.

This package is the composition root: settings, the CLI, and the wiring that hands
each layer (knowledge_base, tools, agents, mcp_server) what it needs.
"""

__version__ = "0.1.0"
