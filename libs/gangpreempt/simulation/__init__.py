"""Replaying a GPU-cluster job trace through the decision code (issue 15, in progress):
the trace reader and what it synthesizes (``trace``), and the measures a replay is
judged on, from its log (``outcomes``)."""
