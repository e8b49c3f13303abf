"""Followed agent sessions (issue #16): Codex CLI rollouts and Claude Code transcripts.

Readers turn the agents' JSONL files into ctxd items and usage (`codex.py`, `claude.py`), prices
turn usage into cost (`pricing.py`), discovery and the watcher find and follow the sessions of the
open workspace folders (`discovery.py`, `watcher.py`, `follower.py`). Nothing here imports wire
code, and nothing here ever writes into the agents' folders.
"""
