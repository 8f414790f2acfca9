"""Kubernetes and Kueue YAML manifests -> the model, with precise errors."""

from gangpreempt.manifests.fields import parse_time
from gangpreempt.manifests.loading import Loaded, load

__all__ = ["Loaded", "load", "parse_time"]
