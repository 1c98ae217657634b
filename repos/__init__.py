"""The AgentGit Django app: repositories, streams, proposals and their admin."""
