"""Rollout workers: the agent loop that turns a task into a scored trajectory."""
