"""The shared core beneath api/ and workers/: what both sides need, and nothing of either."""
