"""The search service: a semantic and lexical index of each workspace that follows its edits."""
