"""What a mixture-of-experts policy adds to the actor's forwards: the rollout's routes
replayed (``actor.router_replay: rollout``, ``ascent.moe.replay``), and the routing terms of
a micro-batch: the expert load, the load-balancing loss (``ascent.moe.routing``) and the
share of tokens routed otherwise than in the rollout. A dense policy has no routers, and
all of this is a no-op."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import Tensor

from ascent.batch import Batch
from ascent.engine.fsdp import TrainEngine
from ascent.engine.modules import unwrap
from ascent.engine.packing import PackedSequences
from ascent.engine.sequence_shard import SequenceShard
from ascent.models.families import family_of
from ascent.moe.replay import RouterReplay, laid_out_routes, routing_mismatch
from ascent.moe.routing import RouterTape, routers_of, routing_terms
from ascent.workers.common import sequence_shard

ROUTES = "routed_experts"


@dataclass
class RoutedPass:
    """One forward's routing: what the routers did (``tape``), what they would have chosen
    when replayed (``replay.natural``), the rollout's routes laid out like the forward's
    tokens (None: the batch has none), and the forward's sequence shard."""

    tape: RouterTape
    replay: RouterReplay
    rollout: list[Tensor] | None
    shard: SequenceShard | None  # this rank's share under sequence parallelism


class PolicyRouting:
    def __init__(self, engine: TrainEngine, replay: bool, aux_loss_coef: float) -> None:
        self.engine, self.replay, self.aux_loss_coef = engine, replay, aux_loss_coef
        self.routers = routers_of(engine.module)  # found once; none for a dense model
        # how a router weighs experts it is told to use: the model family's rule
        self.router_weights = family_of(unwrap(engine.module.model)).training.router_weights

    def require_routes(self, batch: Batch, role: str) -> None:
        if self.replay and ROUTES not in batch:
            raise KeyError(
                f"{role} with actor.router_replay=rollout needs batch field {ROUTES!r} (the "
                "native engine records it for a mixture of experts); the batch has "
                f"{batch.keys()}"
            )

    @contextmanager
    def routed(self, micro: Batch, layout: PackedSequences) -> Iterator[RoutedPass]:
        """Around one forward of ``micro`` laid out as ``layout``."""
        rollout = replayed = None
        shard = sequence_shard(self.engine, micro, layout) if self.routers else None
        if self.routers and ROUTES in micro:
            rollout = laid_out_routes(micro[ROUTES].to(layout.input_ids.device), layout.lay_out)
            replayed = rollout
            if shard is not None:  # this rank routes its share; the metrics see them all
                replayed = [shard.local(routes, -1) for routes in rollout]
                rollout = [shard.padded(routes, -1) for routes in rollout]
        # Replay's hooks first: the tape records the experts the forward actually used.
        with (
            RouterReplay(
                self.routers, replayed if self.replay else None, self.router_weights
            ) as replay,
            RouterTape(self.routers) as tape,
        ):
            yield RoutedPass(tape, replay, rollout, shard)

    def terms(
        self, layout: PackedSequences, routed: RoutedPass, share: float
    ) -> tuple[Tensor | None, dict]:
        """The balancing loss term to add (None when its weight is 0) and the metrics:
        ``moe/*`` load and aux loss, ``moe/routing_mismatch`` (the experts used against the
        rollout's), and with replay ``moe/routing_mismatch_natural`` (what the trainer's
        routers would have chosen against the rollout's)."""
        if not routed.tape.recorded():
            return None, {}
        tape, valid, natural = routed.tape, layout.real_tokens(), routed.replay.natural
        shard = routed.shard
        if shard is not None:  # this rank routed its share: the micro-batch's whole load
            tape, valid = tape.gathered(shard.gather_tokens), shard.real_tokens
            natural = [shard.gather_tokens(experts) for experts in natural]
        balance, metrics = routing_terms(tape, valid, self.aux_loss_coef, share)
        if routed.rollout is not None:
            used = routing_mismatch(tape.experts, routed.rollout, valid)
            metrics["moe/routing_mismatch"] = float(used)
            if self.replay:
                metrics["moe/routing_mismatch_natural"] = float(
                    routing_mismatch(natural, routed.rollout, valid)
                )
        return balance, metrics
