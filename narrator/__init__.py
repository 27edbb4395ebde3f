"""Narrator: the `narrator` command line."""
