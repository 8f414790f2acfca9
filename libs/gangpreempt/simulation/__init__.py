"""Replaying a GPU-cluster job trace through the decision code (issue 15, in progress):
the trace reader and what it synthesizes (``trace``), the cluster and jobs as the
objects gangpreempt reads (``world``), and the measures a replay is judged on, from its
log (``outcomes``)."""
