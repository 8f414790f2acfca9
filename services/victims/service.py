"""victims: workers (any number, sharing one durable consumer) that answer a
``PreemptionRequested`` with a ``PlanProposed`` or ``PreemptionInfeasible``.

Each worker keeps its own STATE replica and computes with the same core call as
``gangpreempt plan --workload``; victims already promised to other preemptors (listed in
the request) are not candidates. Before answering a request delivered again, or one
old enough that quota may have given it up, a worker reads the plan's record: a request
already answered, or given up, gets no second answer (a fresh first delivery is
searched at once: issue 26, one read fewer per decision). Nothing is actuated here.

Searches under a flood (issue 25). A search is synchronous CPU work on the event loop,
the loop that also applies STATE changes (the replica's follower) and answers the NATS
server's pings. The consumer runs 16 handlers at a time so that their reads and
publishes overlap, but their searches take turns: one at a time (``searching``), and
the loop turns before each one, so between two searches the follower, the client's
reads and writes and the other handlers' I/O get their turn: each hop of a STATE change
through the loop (the client's read, its dispatch, the replica's apply) waits for one
search at most, never for the 16 of a batch in a row. The consumer keeps the requests of
a batch not yet answered alive (``bus/consuming.py``), so none is redelivered to the
other replica while it waits for its turn.

The search stays on the loop thread, not in a worker thread: it reads the live state
the follower mutates in place on that thread. ``live.snapshot(now)`` is the ledger's own
``Snapshot``, updated change by change, not a copy; ``live.nodes.planner(now)`` is a
fork that shares the node index's rows, masks and caches with the live index (it copies
only what it writes); both read ``replica.state``, whose dicts the follower changes. A
search in a thread would see a change half applied (a data race), and a private copy to
search on (a snapshot and an index built per search: 0.65 s at 5,000 nodes) costs far
more than the search itself (1-15 ms there). So nothing awaits between the start of a
search and its answer (a fork is valid until the next change), as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg
from opentelemetry.trace import Span

from gangpreempt import events
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.explainwire import ExplainReply, ExplainRequest, explain_subject
from gangpreempt.bus.records import RecordStore
from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import Workload
from gangpreempt.planning import Decision, Victim, plan_on
from gangpreempt.planning.explaining import explain, victim_summary
from gangpreempt.planning.legitimacy import named_rules
from gangpreempt.planning.nodeplan import is_node_level
from gangpreempt.planning.records import REQUESTED
from gangpreempt.preemption.candidates import core_victim_cost
from gangpreempt.telemetry import metrics
from services.livestate import LiveState, key_of
from services.runtime import ServiceContext, fault

log = structlog.get_logger("gangpreempt.victims")


def describe(span: Span, d: Decision, stats: dict[str, int]) -> None:
    """The numbers that matter of one victim search, on its span."""
    span.set_attribute("gangpreempt.preemptor", d.preemptor)
    span.set_attribute("gangpreempt.outcome", d.outcome)
    span.set_attribute("gangpreempt.victims", len(d.victims))
    span.set_attribute("gangpreempt.victim_pods", sum(len(v.pods) for v in d.victims))
    if d.victims:
        span.set_attribute("gangpreempt.priority_ceiling", max(v.priority for v in d.victims))
    for name, value in stats.items():
        span.set_attribute(f"gangpreempt.{name}", value)


def planned(state: ClusterState, v: Victim, preemptor_priority: int) -> events.PlannedVictim:
    """A decision's victim as the plan carries it: the incarnation it was chosen in (a
    Kueue Workload's or a lone pod's uid and resourceVersion) and its pods."""
    kind, _, key = v.object.partition("/")
    obj: Workload | Pod | None = None
    if kind == "Workload":
        obj = state.workloads.get(key)
    elif kind == "Pod":
        obj = state.pods.get(key)
    return events.PlannedVictim(
        object=v.object,
        uid=obj.uid if obj is not None else "",
        resource_version=obj.resource_version if obj is not None else "",
        reason=v.reason,
        cluster_queue=v.queue.removeprefix("ClusterQueue/"),
        priority=v.priority,
        evicting=v.evicting,
        pods=tuple(v.pods),
        pod_uids=tuple(
            (pod.uid if (pod := state.pods.get(ref.removeprefix("Pod/"))) is not None else "")
            for ref in v.pods
        ),
        why=victim_summary(v.reason, v.priority, v.queue, preemptor_priority),
    )


class Victims:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.live = LiveState(ctx, "victims")
        self.replica = self.live.replica
        self.consumer = ctx.decisions_consumer(self.on_event, concurrency=16)
        self.store: RecordStore | None = None
        self.searching = asyncio.Lock()  # one search at a time, the loop turning between

    async def on_event(self, event: Any, delivery: Delivery) -> None:
        if not isinstance(event, events.PreemptionRequested):
            return
        assert self.store is not None
        plan_id = events.stable_id("plan", event.request_id)
        found = await self.store.get(plan_id) if self.may_be_answered(event, delivery) else None
        if found is not None and found[0].state != REQUESTED:
            # Answered already (a redelivery, a duplicate) or given up: nothing to do.
            log.info("request already answered", plan_id=plan_id, state=found[0].state)
            return
        await self.replica.wait_seq(event.state_seq)
        async with self.searching:
            await asyncio.sleep(0)  # the loop turns: the follower, the client, other I/O
            answer = self.answer(event)  # synchronous: nothing changes the state meanwhile
        fault("before-answer")  # the search done, its answer not yet sent
        await self.ctx.publisher.publish(answer)

    def may_be_answered(self, req: events.PreemptionRequested, delivery: Delivery) -> bool:
        """Whether the request's record is worth reading before the search: it came
        before (a redelivery), or it is old enough that quota may have given it up (a
        backlog). A fresh first delivery is searched at once: a copy of it (a duplicate
        past the stream's deduplication) gets the same answer, same id, and quota
        answers a proposal it has seen with the answer its record holds."""
        if delivery.num_delivered > 1:
            return True
        age = (self.ctx.now() - req.occurred_at).total_seconds()
        return age > self.ctx.settings.plan_timeout / 4

    def answer(self, req: events.PreemptionRequested) -> events.Event:
        state, now = self.replica.state, self.ctx.now()
        key = key_of(req.workload)
        plan_id = events.stable_id("plan", req.request_id)
        wl = state.workloads.get(key)

        def infeasible(message: str) -> events.PreemptionInfeasible:
            log.info("infeasible", workload=req.workload, reason=message)
            return events.PreemptionInfeasible(
                id=f"infeasible-{req.request_id}",
                occurred_at=now,
                request_id=req.request_id,
                preemptor=req.workload,
                message=message,
                state_seq=self.replica.seq,
            )

        if is_node_level(state, req.workload):
            return self.answer_nodes(req, plan_id, infeasible)
        if wl is None or (req.uid and wl.uid != req.uid):
            return infeasible("the preemptor no longer exists")
        if not wl.is_pending:
            return infeasible("the preemptor is no longer pending")
        with metrics.core_call("victim_search") as span:
            decision = plan_on(
                self.live.snapshot(now), f"Workload/{key}", excluded=req.claimed
            ).decisions[0]
            describe(span, decision, {})
        if decision.outcome != "Preempt":
            return infeasible(f"{decision.outcome}: {decision.message}")
        return self.proposal(req, plan_id, decision, wl.uid, [ps.name for ps in wl.pod_sets])

    def answer_nodes(
        self,
        req: events.PreemptionRequested,
        plan_id: str,
        infeasible: Callable[[str], events.PreemptionInfeasible],
    ) -> events.Event:
        """A node-level preemptor: the same core call as ``gangpreempt plan --workload
        Pod/...|PodGroup/...``, with the units promised to other plans left alone."""
        now = self.ctx.now()
        try:
            planner = self.live.nodes.planner(now)
            planner.promised.update(req.claimed)
            pre = planner.resolve(req.workload)
            with metrics.core_call("victim_search") as span:
                decision = planner.decide(pre)
                describe(span, decision, planner.stats)
        except InvalidInput as exc:
            return infeasible(str(exc))
        if decision.outcome != "Preempt":
            return infeasible(f"{decision.outcome}: {decision.message}")
        return self.proposal(req, plan_id, decision, "", [g.key for g in pre.groups])

    def proposal(
        self,
        req: events.PreemptionRequested,
        plan_id: str,
        decision: Decision,
        preemptor_uid: str,
        pod_sets: list[str],
    ) -> events.PlanProposed:
        state = self.replica.state
        victims = tuple(planned(state, v, req.priority) for v in decision.victims)
        rules = named_rules(state, req.workload, victims, self.replica.pods)
        if not all(rules.values()):
            # The search and the legitimacy rules disagree: quota will refuse the plan.
            log.warning("a victim no legitimacy rule allows", preemptor=req.workload, rules=rules)
        victims = tuple(msgspec.structs.replace(v, rule=rules[v.object]) for v in victims)
        log.info("plan proposed", preemptor=req.workload, plan_id=plan_id, victims=len(victims))
        return events.PlanProposed(
            id=f"proposed-{plan_id}",
            occurred_at=self.ctx.now(),
            plan_id=plan_id,
            request_id=req.request_id,
            preemptor=req.workload,
            preemptor_uid=preemptor_uid,
            cluster_queue=decision.queue.removeprefix("ClusterQueue/"),
            pod_sets=tuple(pod_sets),
            flavors=decision.flavors,
            victims=victims,
            placement=decision.placement,
            state_seq=self.replica.seq,
            topology=dict(decision.topology),
        )

    async def run(self) -> None:
        ctx = self.ctx
        kv = await ctx.persevering(
            "bind the plans bucket", lambda: ctx.js.key_value(ctx.topology.plans_bucket)
        )
        self.store = RecordStore(kv)
        await ctx.persevering("rebuild the cluster state", self.live.start)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.consumer.run(self.ctx.stop))
            tg.create_task(self.serve_explain())

    async def serve_explain(self) -> None:
        """Answer the admin's ``explain --plan`` requests (one worker of the queue group
        answers each)."""

        async def on_request(msg: Msg) -> None:
            try:
                request = msgspec.json.decode(msg.data, type=ExplainRequest)
                reply = await self.explain(request)
            except msgspec.DecodeError as exc:
                reply = ExplainReply(error=f"invalid request: {exc}")
            await msg.respond(msgspec.json.encode(reply))

        subject = explain_subject(self.ctx.topology)
        sub = await self.ctx.nc.subscribe(subject, queue="victims", cb=on_request)
        await self.ctx.stop.wait()
        await sub.unsubscribe()

    async def explain(self, request: ExplainRequest) -> ExplainReply:
        """The plan's record as it stands, and the decision explained on this worker's
        state now (the state may have moved on since the plan was made)."""
        workload, known = request.workload, ExplainReply()
        if request.plan_id:
            assert self.store is not None  # bound before the requests are served
            found = await self.store.get(request.plan_id)
            if found is None:
                return ExplainReply(error=f"no plan record {request.plan_id!r}")
            rec = found[0]
            victims = [v.object for v in rec.proposal.victims] if rec.proposal else []
            known = ExplainReply(plan_state=rec.state, plan_victims=victims, plan_reason=rec.reason)
            workload = workload or rec.preemptor
        if not workload:
            return ExplainReply(error="give a plan id or a workload")
        try:
            with metrics.core_call("explain"):
                found_now = explain(
                    self.replica.state,
                    self.ctx.now(),
                    workload,
                    victim_cost=core_victim_cost(self.ctx.settings.victim_cost),
                )
        except InvalidInput as exc:
            return msgspec.structs.replace(known, error=str(exc))
        return msgspec.structs.replace(known, explanation=found_now)


async def main(ctx: ServiceContext) -> None:
    await Victims(ctx).run()


__all__ = ["Victims", "main"]
