"""Part of the vLLM-Omni stand-in (tests/doubles/site)."""
