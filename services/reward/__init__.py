"""The reward service: grade a finished session with the task's hidden tests."""
