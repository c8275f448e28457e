"""Which metrics the report plots together, by the names the trainer logs them under.

Each panel names its metrics as written to ``metrics.jsonl``: the batch statistics
(``ascent.trainer.rl.advantage.batch_metrics``: ``critic/score``, ``response_length``, ...),
the workers' update metrics (``actor/*``, ``critic/*``: ``ascent.workers.metrics``, names from
``ascent.algos``), stage seconds (``timing_s/*``: ``ascent.trainer.rl.timing``), validation
(``val/*``: ``ascent.trainer.rl.validation``, and the SFT and reward-model loops), async
staleness (``async/*``: ``ascent.trainer.rl.ahead``) and agent episodes (``agent/*``:
``ascent.agents.episodes``). A panel draws the ones a run recorded; a panel the run should
have and has none of is listed as not recorded.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from ascent.report.reading import Run

# val/<source>/<name> fields that are rates or scores (one axis); the rest (loss, margin,
# scorer failures) go to a second validation panel.
VALIDATION_SCORES = ("acc", "accuracy", "score", "model_score", "judge_score", "used_tools")
# val/<source>/mean@k, pass@k, maj@k and val/pass@k (all sources): sampled validation.
AT_K = re.compile(r"(mean|pass|maj)@\d+")


def _rl(run: Run) -> bool:
    return run.kind == "rl"


def _always(run: Run) -> bool:
    return True


def _optional(run: Run) -> bool:
    return False


def _async(run: Run) -> bool:
    return run.kind == "rl" and run.setting("trainer.mode", "sync") != "sync"


def _agent(run: Run) -> bool:
    return run.kind == "rl" and run.setting("rollout.agent") is not None


def _distilled(run: Run) -> bool:
    return run.kind == "rl" and run.setting("teacher") is not None


def _validated(run: Run) -> bool:
    scheduled = run.setting("trainer.val_every", 1) != 0 or run.setting("trainer.val_at_start")
    return bool(_rl(run) and scheduled and run.setting("data.val_files", ["unknown"]))


def _sampled_validation(run: Run) -> bool:
    return _validated(run) and run.setting("trainer.val_samples_per_prompt", 1) > 1


@dataclass(frozen=True)
class Panel:
    """One plot. keys: metric names drawn when recorded, in this order; match: also every
    recorded name it accepts (families such as ``timing_s/*``); band: (low, high) names
    shaded around the first line; expected: whether a run like this one should record it
    (a panel it does not record is then listed as missing, with ``missing``'s reason);
    family: how the missing line names the metrics of a ``match`` panel."""

    slug: str
    title: str
    caption: str
    keys: tuple[str, ...] = ()
    match: Callable[[str], bool] | None = None
    band: tuple[str, str] | None = None
    ylabel: str = ""
    expected: Callable[[Run], bool] = _always
    missing: str = ""
    family: str = ""

    def metrics(self, run: Run) -> list[str]:
        """The names this panel draws for ``run``, in drawing order."""
        names = [key for key in self.keys if key in run.series]
        if self.match is not None:
            names += [key for key in run.series if self.match(key) and key not in names]
        return names


def _validation_score(key: str) -> bool:
    return key.startswith("val/") and key.rsplit("/", 1)[-1] in VALIDATION_SCORES


def _validation_at_k(key: str) -> bool:
    return key.startswith("val/") and AT_K.fullmatch(key.rsplit("/", 1)[-1]) is not None


def _validation_other(key: str) -> bool:
    return key.startswith("val/") and not _validation_score(key) and not _validation_at_k(key)


PANELS = (
    Panel(
        "reward",
        "Reward",
        "Means over the step's responses. critic/score: the scorers' score; critic/rewards: "
        "the reward trained on (after shaping and any KL penalty); reward/*: each scorer's "
        "part.",
        keys=(
            "critic/score/mean",
            "critic/rewards/mean",
            "reward/function/mean",
            "reward/model/mean",
            "reward/judge/mean",
        ),
        expected=_rl,
    ),
    Panel(
        "accuracy",
        "Training accuracy",
        "Share of the step's responses the scorer counted correct (critic/acc/mean); "
        "reward-model runs: rm/accuracy on training pairs.",
        keys=("critic/acc/mean", "rm/accuracy"),
        ylabel="share",
        expected=_rl,
    ),
    Panel(
        "validation",
        "Validation",
        "Answers to the held-out prompts, per data source (val/<source>/acc, /score): one "
        "greedy answer each, or the mean over trainer.val_samples_per_prompt sampled ones "
        "(with /greedy/* beside them under trainer.val_greedy).",
        match=_validation_score,
        family="val/<source>/acc or /score",
        expected=_validated,
        missing="validation is scheduled (trainer.val_every, data.val_files) but the run "
        "stopped before its first",
    ),
    Panel(
        "validation_at_k",
        "Validation at k samples",
        "Over n sampled answers per held-out prompt, exact expectations over k of them: "
        "mean@k (mean accuracy), pass@k (any right; the best accuracy), maj@k (the most "
        "common answer's accuracy); per data source and over all prompts (val/pass@k).",
        match=_validation_at_k,
        family="val/<source>/pass@k, mean@k or maj@k",
        ylabel="share",
        expected=_sampled_validation,
        missing="trainer.val_samples_per_prompt > 1 logs them at each validation",
    ),
    Panel(
        "validation_other",
        "Validation loss and other",
        "Held-out loss (SFT, reward models), margin, and scorer failures on validation.",
        match=_validation_other,
        expected=_optional,
    ),
    Panel(
        "kl",
        "KL divergence",
        "actor/kl_loss: KL to the reference as a loss term; actor/reward_kl_penalty: KL "
        "subtracted from the reward; actor/ppo_kl: new versus old policy in the update; "
        "rollout/mismatch_kl: trainer versus generator log-probs.",
        keys=(
            "actor/kl_loss",
            "actor/reward_kl_penalty",
            "actor/ppo_kl",
            "rollout/mismatch_kl",
        ),
        expected=_rl,
    ),
    Panel(
        "distillation",
        "Distillation",
        "The student against its teacher on the tokens it sampled: distill/reverse_kl (mean "
        "lp_student - lp_teacher, nats), distill/agreement (share that are the teacher's "
        "top-1), and the loss terms actor/distill_reverse_kl_loss and "
        "actor/distill_forward_kl_top_k.",
        keys=(
            "distill/reverse_kl",
            "distill/agreement",
            "actor/distill_reverse_kl_loss",
            "actor/distill_forward_kl_top_k",
        ),
        expected=_distilled,
        missing="a run with a teacher logs distill/* every step",
    ),
    Panel(
        "entropy",
        "Policy entropy",
        "Mean token entropy of the policy on the step's responses (actor/entropy), in nats.",
        keys=("actor/entropy",),
        expected=_rl,
    ),
    Panel(
        "response_length",
        "Response length",
        "Tokens per response (response_length/mean; shaded: min to max).",
        keys=("response_length/mean",),
        band=("response_length/min", "response_length/max"),
        ylabel="tokens",
        expected=_rl,
    ),
    Panel(
        "clip_fraction",
        "Clip fractions",
        "actor/pg_clipfrac (and _lower): share of tokens whose policy ratio was clipped; "
        "critic/vf_clipfrac: the value loss's; response_length/clip_ratio: share of "
        "responses cut at rollout.max_response_length.",
        keys=(
            "actor/pg_clipfrac",
            "actor/pg_clipfrac_lower",
            "critic/vf_clipfrac",
            "response_length/clip_ratio",
        ),
        ylabel="share",
        expected=_rl,
    ),
    Panel(
        "loss",
        "Training loss",
        "The policy loss (actor/pg_loss), the critic's value loss, or the SFT and "
        "reward-model losses.",
        keys=("actor/pg_loss", "critic/vf_loss", "sft/loss", "rm/loss"),
    ),
    Panel(
        "values",
        "Values, returns and advantages",
        "Means over response tokens: the critic's values (critic/values), the returns it "
        "learns (critic/returns) and the advantages the policy trains on.",
        keys=("critic/values/mean", "critic/returns/mean", "critic/advantages/mean"),
        expected=_optional,  # advantages alone are on every RL run; values only with a critic
    ),
    Panel(
        "grad_norm",
        "Gradient norm",
        "Gradient norm before clipping, per optimiser step, averaged over the step.",
        keys=("actor/grad_norm", "critic/grad_norm", "sft/grad_norm", "rm/grad_norm"),
    ),
    Panel(
        "timings",
        "Stage timings",
        "Seconds per stage of a step (timing_s/<stage>); timing_s/step is the whole step.",
        match=lambda key: key.startswith("timing_s/"),
        family="timing_s/*",
        ylabel="seconds",
    ),
    Panel(
        "staleness",
        "Staleness (async)",
        "How many weight versions the trained samples lag the policy (async/staleness_mean, "
        "_max) and the share of samples generated across a weight update.",
        keys=("async/staleness_mean", "async/staleness_max", "async/mixed_version_frac"),
        expected=_async,
        missing="an async run (trainer.mode) should log async/*",
    ),
    Panel(
        "agent_turns",
        "Agent turns and tool calls",
        "Per episode: turns, tool calls and failed tool calls (agent/*/mean).",
        keys=("agent/turns/mean", "agent/tool_calls/mean", "agent/tool_errors/mean"),
        expected=_agent,
    ),
    Panel(
        "agent_tools",
        "Agent tool use",
        "Share of episodes that used a tool, share of tool calls that failed, and how "
        "episodes ended (agent/end/*).",
        keys=("agent/used_tools", "agent/tool_error_rate"),
        match=lambda key: key.startswith("agent/end/"),
        ylabel="share",
        expected=_agent,
    ),
)


def drawn(run: Run) -> list[tuple[Panel, list[str]]]:
    """The panels ``run`` has metrics for, each with the names it draws."""
    return [(panel, names) for panel in PANELS if (names := panel.metrics(run))]


def not_recorded(run: Run) -> list[str]:
    """One line per panel a run like ``run`` should have but has no metric of."""
    lines = []
    for panel in PANELS:
        if panel.expected(run) and not panel.metrics(run):
            looked = panel.family or ", ".join(panel.keys)
            why = f": {panel.missing}" if panel.missing else ""
            lines.append(f"{panel.title}: none of {looked} in {run.path.name}/metrics.jsonl{why}")
    return lines
