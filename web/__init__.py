"""The web console: static files served by the API at `/` (no build step)."""
