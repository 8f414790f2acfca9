"""The quota service."""
