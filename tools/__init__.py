"""Developer tools run by the Makefile (not part of the agent, not in the wheel)."""
