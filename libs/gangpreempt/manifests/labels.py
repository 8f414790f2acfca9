"""The labels kept on the objects read (pods, nodes, namespaces): those an API server
could hold, within a budget per object.

**Which labels gangpreempt reads.** Some by name: the gang labels of the
scheduler-plugins and of Kueue, Kueue's pod set, queue and priority labels, Koordinator's
quota labels (any key under ``quota.scheduling.koordinator.sh/``), gangpreempt's own,
``kubernetes.io/hostname``. Others are matched against selectors whose keys anyone may
choose: a PodDisruptionBudget's selector against pod labels (and whether a pod has any
label at all), node selectors, required node affinity, a ResourceFlavor's node labels
and a gang's topology key against node labels, a ClusterQueue's namespace selector
against namespace labels. So every label may be read.

**Why not only the keys the selectors seen reference.** Then what is kept of an object
would depend on other objects: a PodDisruptionBudget created later, or a pending pod
asking for a new node label, would have to make every pod or every node published again
(a tenant's node selector would republish the whole cluster's nodes), and a file the
sim's timeline applies alone would lose the labels the budgets in the live state name.
What ingest publishes of an object must follow from that object alone.

**What is kept.** A label is kept when it is one Kubernetes accepts by size: a key of at
most 253 characters of prefix and 63 of name, a value of at most 63 characters (API
validation refuses anything longer, so an API server never serves one); and the kept
labels of one object add up to at most ``MAX_LABEL_CHARACTERS`` (256 KiB, the limit
Kubernetes puts on an object's annotations), the labels gangpreempt reads by name first,
then the others in key order. Anything else is left out, with a warning naming the
object. An object an API server holds keeps every label (none is longer, and no real
object carries 256 KiB of them): decisions are those on the whole object; an object
with a megabyte of labels (a file, or a tenant's thousands of labels) is published
without the excess, and never grows past what NATS carries because of its labels. (A
tenant's pod with more than 256 KiB of valid labels can lose a label one of its own
PodDisruptionBudgets selects on: the cost falls on that pod alone.)

**Annotations** are not kept whole on any object: the decoders copy only the values of
the ones they read (Kueue's workload name, the planned nodes, a gang's topology key, the
checkpoint times, Koordinator's shared weight, which is read as quantities and bounded
as any). Kubernetes holds an object's annotations to 256 KiB in all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gangpreempt.manifests.fields import Fields, join

MAX_PREFIX = 253  # a DNS subdomain
MAX_NAME = 63
MAX_VALUE = 63
MAX_LABEL_CHARACTERS = 256 * 1024  # keys and values of the labels kept on one object

# Labels gangpreempt reads by name (kept first when an object's labels are over budget).
READ_PREFIXES = (
    "gangpreempt.io/",
    "kueue.x-k8s.io/",
    "scheduling.x-k8s.io/",
    "pod-group.scheduling.sigs.k8s.io",
    "quota.scheduling.koordinator.sh/",
    "scheduling.koordinator.sh/",
    "kubernetes.io/hostname",
    "kubernetes.io/metadata.name",
)


def label_problem(key: str, value: str) -> str | None:
    """Why Kubernetes would refuse this label for its size, or None."""
    if len(value) > MAX_VALUE:
        return f"its value has {len(value)} characters (at most {MAX_VALUE})"
    prefix, _slash, name = key.rpartition("/")
    if len(name) > MAX_NAME:
        return f"its name has {len(name)} characters (at most {MAX_NAME})"
    if len(prefix) > MAX_PREFIX:
        return f"its prefix has {len(prefix)} characters (at most {MAX_PREFIX})"
    return None


def _shown(key: str) -> str:
    return repr(key) if len(key) <= 80 else f"{key[:60]!r}... ({len(key)} characters)"


def labels_fit(labels: Mapping[str, str]) -> bool:
    """Whether every label is kept as it is (the common case, checked cheaply)."""
    total = 0
    for key, value in labels.items():
        if len(value) > MAX_VALUE or (len(key) > MAX_NAME and label_problem(key, value)):
            return False
        total += len(key) + len(value)
    return total <= MAX_LABEL_CHARACTERS


def bounded_labels(labels: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """(the labels kept, a message saying what was left out, or None when nothing was)."""
    if labels_fit(labels):
        return dict(labels), None
    invalid: list[str] = []
    valid: list[str] = []
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem is None:
            valid.append(key)
        elif len(invalid) < 3:
            invalid.append(f"{_shown(key)}: {problem}")
        else:
            invalid.append("")
    valid.sort(key=lambda k: (not k.startswith(READ_PREFIXES), k))
    kept: set[str] = set()
    room = MAX_LABEL_CHARACTERS
    over = 0
    for key in valid:
        size = len(key) + len(labels[key])
        if size <= room:
            kept.add(key)
            room -= size
        else:
            over += 1
    parts = []
    if invalid:
        shown = "; ".join(i for i in invalid if i)
        more = len(invalid) - sum(1 for i in invalid if i)
        parts.append(
            f"{len(invalid)} label(s) longer than Kubernetes allows left out ({shown}"
            + (f"; and {more} more" if more else "")
            + ")"
        )
    if over:
        parts.append(
            f"{over} label(s) left out past {MAX_LABEL_CHARACTERS} characters of labels per object"
        )
    return {k: v for k, v in labels.items() if k in kept}, "; ".join(parts)


def metadata_labels(meta: Fields, warn: Callable[[str], None] | None = None) -> dict[str, str]:
    """``metadata.labels`` as kept (see the module), what is left out said to ``warn``."""
    labels, dropped = bounded_labels(meta.text_map("labels"))
    if dropped is not None and warn is not None:
        path = join(meta.path, "labels")
        warn(meta.where.error(path, dropped, meta.data, "labels").render())
    return labels


__all__ = [
    "MAX_LABEL_CHARACTERS",
    "MAX_NAME",
    "MAX_PREFIX",
    "MAX_VALUE",
    "bounded_labels",
    "label_problem",
    "labels_fit",
    "metadata_labels",
]
