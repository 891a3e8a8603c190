"""Sandboxes: where a session's commands run, and how they are held in."""
