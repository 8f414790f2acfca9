"""Talking to the Kubernetes API server: what each service may call (``access``), the
client (``client``), the list+watch loop (``watching``) and the writes (``writing``)."""
