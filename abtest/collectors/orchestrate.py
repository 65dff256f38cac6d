"""Fill a run store: labels (kernels or settings) x workloads x iterations on one target (the loop).

    collect(CollectConfig(target_cfg, labels, workloads, iterations=5))

The parts, by responsibility: plan.py (the configuration, shared with the lab loop abtest.collectors.lab.collect,
and the iteration order), provider.py (boot a label's kernel, reboots, recovery), cooldown.py, target_state.py
(probe, scratch directory, state journal, restoring what a dead run left), iteration.py (one iteration).

For each planned iteration: activate the label (boot its kernel through the target file's boot
entry and verify `uname -r`), then under the target lock apply its settings, cool down, start ftrace
(+ power sampler), run the workload between trace markers, stop, put tracefs and the settings back, pull,
and write metrics.json + meta.json + .complete in a temp directory renamed into place. A dropped
connection / target reboot / failed workload discards the temp directory and retries (bounded); Ctrl-C
discards only the iteration in flight; `resume=True` skips iterations already complete.

Target state (abtest.collectors.host_state): a journal of the original values is written on the host
before the first change to a target, and removed when the collection ends having put them back; a run
that finds the journal of a dead run restores it first (`abtest collect --restore` does only that).
Scratch files on the target live in a private directory made by `mktemp -d` (removed at the end).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from abtest.collectors.iteration import run_iteration
from abtest.collectors.plan import (
    CollectConfig,
    CollectError,
    LabelSpec,
    checked_plan,
    console_and_log,
    discard_interrupted,
    make_plan,
    progress_bar,
)
from abtest.collectors.provider import TargetProvider
from abtest.collectors.target_state import TargetState, after_reboot, make_state, restore_target
from abtest.collectors.workloads.base import WorkloadError
from abtest.store.writer import IterationWriter, iteration_dir
from abtest.targets.base import TargetConnectionError, TargetError, TargetTimeout

# the loop and what its callers (abtest collect, abtest bisect) import from here
__all__ = ["CollectConfig", "CollectError", "LabelSpec", "TargetProvider", "collect", "make_plan", "restore_target"]

RETRYABLE = (TargetConnectionError, TargetTimeout, WorkloadError, OSError, EOFError)


def collect(
    cc: CollectConfig, provider: TargetProvider | None = None, log: Callable[[str], None] | None = None
) -> dict:
    """Run the whole plan; return a summary {"done", "skipped", "retries", "iterations": [...]}.

    Raises CollectError when an iteration fails after its retries; KeyboardInterrupt propagates after
    cleaning up (completed iterations stay).
    """
    console, log = console_and_log(log)
    store = Path(cc.store)
    plan, done_already = checked_plan(cc)
    if done_already and not cc.resume:
        p = done_already[0]
        raise CollectError(
            f"{iteration_dir(store, p.label, p.workload, p.iteration)} is already complete "
            f"({len(done_already)} of {len(plan)} planned iterations are): pass --resume to "
            f"continue this collection, or choose another --store"
        )
    discard_interrupted(store, log)
    events = cc.events()
    label_by_name = {l.name: l for l in cc.labels}
    wl_by_name = {w.name: w for w in cc.workloads}
    if provider is None:
        if cc.target_cfg.kind == "qemu":
            from abtest.targets.qemu import QemuProvider

            provider = QemuProvider(cc.target_cfg, log=log)
        else:
            provider = TargetProvider(cc.target_cfg, log=log)
    summary = {"done": 0, "skipped": len(done_already), "retries": 0, "iterations": []}
    states: dict[int, TargetState] = {}
    todo = [p for p in plan if p not in done_already]
    progress = progress_bar(console, cc.progress)
    try:
        with progress:
            task = progress.add_task("collect", total=len(plan), completed=len(done_already))
            for step in todo:
                label = label_by_name[step.label]
                wl = wl_by_name[step.workload]
                progress.update(task, description=f"{step.label} / {step.workload} #{step.iteration}")
                attempt = 0
                while True:
                    attempt += 1
                    writer = None
                    try:
                        t = provider.activate(label)
                        generation = getattr(provider, "boots", 0)
                        st = states.get(id(t))
                        if st is None:
                            st = states[id(t)] = make_state(t, cc, events, generation=generation, log=log)
                        elif st.generation != generation:
                            after_reboot(st, cc, generation)
                        said = len(st.settings.warnings)
                        boot_meta = vars(label.boot) if label.boot else None
                        writer = IterationWriter(store, step.label, step.workload, step.iteration)
                        try:
                            run_iteration(st, cc, label, wl, step.iteration, attempt, writer, boot_meta)
                        finally:
                            for w in st.settings.warnings[said:]:
                                log(f"[yellow]warning: {w}[/]")
                        summary["done"] += 1
                        summary["iterations"].append(str(writer.final))
                        break
                    except RETRYABLE as e:
                        if writer:
                            writer.discard()
                        if attempt > cc.retries:
                            raise CollectError(
                                f"{step.label}/{step.workload}/{step.iteration}: failed after {attempt} attempts: {e}"
                            ) from e
                        summary["retries"] += 1
                        log(
                            f"[yellow]retrying {step.label}/{step.workload}/{step.iteration} "
                            f"(attempt {attempt} failed: {e})[/]"
                        )
                        for st in states.values():
                            st.prepared.clear()
                        try:
                            provider.recover(label)
                        except RETRYABLE as e2:
                            log(f"[yellow]target not back yet: {e2}[/]")
                    except BaseException:
                        if writer:
                            writer.discard()
                        raise
                progress.advance(task)
    finally:
        for st in states.values():
            try:
                with st.lock:
                    traced_back = st.collector.restore() if st.collector else True
                    st.settings.restore()
                if traced_back is False:
                    raise TargetError(f"{st.target.name}: putting tracefs back failed")
                if st.made_remote_dir:
                    st.target.run(["rm", "-rf", st.remote_dir], 60, as_root=True)
                if st.journal:
                    st.journal.close()  # everything is back: nothing for a later run to restore
            except (TargetError, OSError, EOFError) as e:
                log(f"[red]cleanup on {st.target.name} failed: {e}; `abtest collect --restore` retries it[/]")
        provider.close()
    return summary
