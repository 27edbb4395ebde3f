#!/usr/bin/env bash
# Quickstart 1: install into .venv and run the embedded platform on http://127.0.0.1:8000.
EXTRAS="" source "$(dirname "$0")/bootstrap.sh"
exec .venv/bin/narrator serve "$@"
