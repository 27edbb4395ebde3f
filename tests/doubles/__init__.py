"""Test doubles, only at the GPU engine boundary."""
