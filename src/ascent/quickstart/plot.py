"""The quickstart's picture: training reward per step and held-out accuracy."""

from pathlib import Path


def plot_run(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    figure, (reward_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(10, 4))
    steps, rewards = zip(*summary["reward"], strict=True)
    reward_axis.plot(steps, rewards, linewidth=1)
    reward_axis.set(
        title="mean reward per step (sampled)", xlabel="GRPO step", ylabel="reward", ylim=(0, 1)
    )
    points, accuracy = zip(*summary["held_out_accuracy"], strict=True)
    accuracy_axis.plot(points, [100 * a for a in accuracy], marker="o")
    accuracy_axis.set(
        title=f"held-out accuracy (greedy, {summary['held_out_problems']} problems)",
        xlabel="GRPO step",
        ylabel="% correct",
        ylim=(0, 100),
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
