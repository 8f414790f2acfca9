"""The victims service."""
