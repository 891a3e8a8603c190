"""The bug synthesizer: mutate a project with a test suite, keep what its tests catch."""
