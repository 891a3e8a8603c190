"""Tasks: what an agent is asked to do, and the hidden tests that check it."""
