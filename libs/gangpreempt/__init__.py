"""gangpreempt: gang-aware preemption decisions for Kubernetes batch and AI clusters.

The pure core (``model``, ``manifests``, ``quota``, ``preemption``) takes data in and
gives a decision out; it does no network I/O, no asyncio and no logging.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
