"""The lab collection loop: plan -> jobs submitted interleaved -> polled with progress -> harvested.

    summary = collect_lab(CollectConfig(lab=parse_lab(...), target_cfg=..., labels=..., workloads=...))

Order: round r of the plan holds every label for every workload; rounds alternate direction (A B, B A,
A B, ...: `--order interleave`) so that, when a lab hands queued jobs to devices first come first served,
each label lands on each device instead of A always taking the first free one. `--order blocked` keeps
A A .. B B. At most `max_in_flight` jobs are queued or running (default: twice the lab's matching
devices, so every device has its next job waiting while abtest harvests the last one).

A failed attempt (job Incomplete or Canceled, script error, missing or corrupt artifact, wrong kernel,
workload failure) is recorded in the journal with its reason and resubmitted, at most `retries` times
per iteration; an iteration that still fails is reported in the summary (`failed`) and the collection
goes on with the others. Nothing of a failed attempt reaches the store.

Interrupted (Ctrl-C): jobs in the lab are canceled (marked canceled in the journal, not counted as
failures), complete iterations stay. `--resume` skips complete iterations, polls jobs the journal
still lists as submitted (their artifacts are harvested if they came through the log, or were uploaded
before abtest stopped) and resubmits the rest.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from abtest.collectors.lab import guest_script as gs
from abtest.collectors.lab.backends import JobStatus, LabError, LabUnavailable, make_backend
from abtest.collectors.lab.config import load_token
from abtest.collectors.lab.harvest import AttemptFailed, HarvestContext, harvest
from abtest.collectors.lab.images import CONSOLE_PROMPT, BootImages, qemu_boot_images
from abtest.collectors.lab.job import job_definition, qemu_actions
from abtest.collectors.lab.journal import LAB_DIR, Attempt, Journal, lab_dir
from abtest.collectors.lab.receiver import ArtifactReceiver
from abtest.collectors.plan import (
    CollectConfig,
    CollectError,
    PlannedIteration,
    checked_plan,
    console_and_log,
    discard_interrupted,
    make_plan,
    progress_bar,
)
from abtest.collectors.workloads.base import Workload
from abtest.safe_io import UnsafePathError
from abtest.store.writer import IterationWriter
from abtest.targets.shell import slug


def lab_plan(
    labels: list[str], workloads: list[str], iterations: int, order: str = "interleave"
) -> list[PlannedIteration]:
    """interleave: per iteration, every workload, labels in alternating direction (A B | B A | A B ...);
    blocked: A A .. B B .."""
    return make_plan(labels, workloads, iterations, order, alternate=True)


def attempt_key(label: str, workload: str, iteration: int, attempt: int) -> str:
    """A new attempt key: `<label>-<workload>-<iteration>-a<attempt>-<8 hex>`. It names a staging directory and
    is one word of the console protocol, so label and workload names (which may hold spaces or `+`) enter it
    through abtest.targets.shell.slug (other characters become `_`); the random tail keeps it unique."""
    return f"{slug(label)}-{slug(workload)}-{int(iteration)}-a{int(attempt)}-{secrets.token_hex(4)}"


def check_supported(cc: CollectConfig) -> None:
    """Refuse what a lab job cannot do (CollectError naming it)."""
    for label in cc.labels:
        if label.settings:
            raise CollectError(
                f"label {label.name}: settings labels are not supported through a lab yet "
                f"(use kernel labels: [boot.{label.name}])"
            )
        if label.name not in cc.lab.actions and (label.boot is None or not label.boot.package):
            raise CollectError(
                f"label {label.name}: a lab job needs the label's kernel: [boot.{label.name}] "
                f'package = "linux-image-..." (QEMU recipe) or [lab.actions.{label.name}] '
                f"deploy/boot actions"
            )
    if any(l.name not in cc.lab.actions for l in cc.labels) and cc.lab.prompt != CONSOLE_PROMPT:
        raise CollectError(
            f"[lab] prompt {cc.lab.prompt!r}: the QEMU recipe's console prompt is {CONSOLE_PROMPT!r} "
            f"(prompt is for images of [lab.actions])"
        )
    for wl in cc.workloads:
        if type(wl).prepare is not Workload.prepare or type(wl).collect is not Workload.collect:
            raise CollectError(
                f"workload {wl.name} ({wl.KIND}) pushes inputs or pulls result files, which a "
                f"lab job does not do yet; workloads whose output is their stdout work"
            )
    if cc.target_cfg.trace.get("backend", "ftrace") != "ftrace" and cc.trace:
        raise CollectError('a lab job traces with ftrace ([trace] backend = "ftrace")')
    if cc.target_cfg.power.get("sampler", "none") not in ("none", "hwmon", "rapl", "odpm"):
        raise CollectError(f"[power] sampler {cc.target_cfg.power.get('sampler')!r} is unknown")


class _Run:
    """State of one collect_lab call."""

    def __init__(
        self,
        cc: CollectConfig,
        backend,
        receiver: ArtifactReceiver | None,
        journal: Journal,
        log: Callable[[str], None],
    ):
        self.cc, self.backend, self.receiver, self.journal, self.log = cc, backend, receiver, journal, log
        self.labels = {l.name: l for l in cc.labels}
        self.workloads = {w.name: w for w in cc.workloads}
        self.images: dict[str, BootImages] = {}
        self.image_urls: dict[str, tuple[str, str]] = {}
        self.events = cc.events() if cc.trace else []
        self.buffer_size_kb, self.clock = cc.buffer_kb, cc.clock
        power = dict(cc.target_cfg.power)
        self.power = power if power.get("sampler", "none") != "none" else None
        self.in_flight: dict[int, dict] = {}  # job id -> {"attempt", "definition", "script", "upload"}
        # declared bound on what a job log's data blocks may inflate to: the log budget plus the small files
        self.max_log_data_bytes = int(cc.lab.log_max_mb * (1 << 20)) + len(gs.RETURNED_FILES) * gs.SMALL_BYTES

    # -- preparing jobs ------------------------------------------------------------------------------
    def prepare_images(self) -> None:
        for name, label in self.labels.items():
            if name in self.cc.lab.actions:
                continue
            img = qemu_boot_images(name, label.boot, self.cc.target_cfg.qemu, log=self.log)
            self.images[name] = img
            if self.cc.lab.image_transport == "http":
                self.image_urls[name] = (
                    self.receiver.register_image(img.vmlinuz, img.sha256["kernel"]),
                    self.receiver.register_image(img.ramdisk, img.sha256["ramdisk"]),
                )
            else:
                # LAVA takes the path after file:// verbatim (no percent-decoding: "+" must stay "+")
                self.image_urls[name] = (f"file://{img.vmlinuz.resolve()}", f"file://{img.ramdisk.resolve()}")
            self.log(f"{name}: {img.kernel.package} ({img.kernel.release}), ramdisk {img.ramdisk.name}")

    def test_timeout_min(self, wl: Workload) -> int:
        return self.cc.lab.test_timeout_min or int(wl.timeout_s // 60) + 5

    def build_job(self, a: Attempt) -> dict:
        wl = self.workloads[a.workload]
        tag = f"label={a.label} workload={a.workload} iteration={a.iteration}"
        script = gs.build_script(
            gs.GuestSpec(
                key=a.key,
                tag=tag,
                command=wl.command(gs.GUEST_DIR),
                tools=tuple(wl.TOOLS),
                timeout_s=wl.timeout_s,
                events=self.events,
                buffer_size_kb=self.buffer_size_kb,
                clock=self.clock,
                power=self.power,
                transport=self.cc.lab.artifacts,
                log_max_bytes=int(self.cc.lab.log_max_mb * (1 << 20)),
            )
        )
        upload = self.receiver.open_slot(a.key) if (self.receiver and self.cc.lab.artifacts == "upload") else ""
        if a.label in self.cc.lab.actions:
            acts = self.cc.lab.actions[a.label]
            deploy, boot = dict(acts["deploy"]), dict(acts["boot"])
        else:
            deploy, boot = qemu_actions(self.images[a.label], *self.image_urls[a.label], self.cc.lab)
        definition = job_definition(
            self.cc.lab,
            label=a.label,
            workload=a.workload,
            iteration=a.iteration,
            attempt=a.attempt,
            key=a.key,
            deploy=deploy,
            boot=boot,
            commands=gs.delivery_commands(script, upload),
            test_timeout_min=self.test_timeout_min(wl),
            qemu_context=a.label not in self.cc.lab.actions,
        )
        return {"definition": definition, "script": script, "upload": upload}

    def submit(self, step: PlannedIteration) -> None:
        n = len(self.journal.for_slot((step.label, step.workload, step.iteration))) + 1
        key = attempt_key(step.label, step.workload, step.iteration, n)
        a = Attempt(step.label, step.workload, step.iteration, n, key)
        job = self.build_job(a)
        a.job_id = self.backend.submit(job["definition"])
        self.journal.add(a)
        self.in_flight[a.job_id] = {"attempt": a, **job}

    # -- finishing jobs -------------------------------------------------------------------------------
    def harvest_one(self, job_id: int, status) -> tuple[bool, str | None]:
        """(committed, the iteration path or the failure reason). LabUnavailable while fetching the log
        leaves the job in flight (polled again)."""
        log_text = self.backend.log(job_id)
        entry = self.in_flight.pop(job_id)
        a: Attempt = entry["attempt"]
        if entry.get("upload") and self.receiver:
            self.receiver.close_slot(entry["upload"])
        label, wl = self.labels[a.label], self.workloads[a.workload]
        received = self.receiver.received(a.key) if self.receiver else {}
        ctx = HarvestContext(
            lab=self.cc.lab.describe(),
            job_url=self.cc.lab.job_url(job_id),
            worker=self.backend.device_worker(status.device),
            target_name=self.cc.target_cfg.name,
            target_file=str(self.cc.target_cfg.path) if self.cc.target_cfg.path else None,
            emulated=a.label not in self.cc.lab.actions and self.cc.lab.device_type.startswith("qemu"),
            label_name=a.label,
            boot={
                **(vars(label.boot) if label.boot else {}),
                **({"images": self.images[a.label].describe()} if a.label in self.images else {}),
            },
            expect_release=label.boot.expect_release if label.boot else "",
            workload=wl,
            events_requested=self.events,
            analyses=self.cc.analyses,
            power=self.power,
            platform=self.cc.target_cfg.platform,
            definition=entry["definition"],
            script=entry["script"],
            failed_attempts=[{"job_id": f.job_id, "reason": f.reason} for f in self.journal.failures(a.slot)],
            max_log_data_bytes=self.max_log_data_bytes,
        )
        writer = IterationWriter(self.cc.store, a.label, a.workload, a.iteration)
        try:
            path = harvest(
                writer,
                ctx,
                status,
                log_text,
                received,
                key=a.key,
                iteration=a.iteration,
                attempt=a.attempt,
                buffer_size_kb=self.buffer_size_kb,
                clock=self.clock,
            )
        except AttemptFailed as e:
            writer.discard()
            self.journal.update(a, state="failed", reason=e.reason)
            return False, e.reason
        except Exception as e:  # not a verdict on the attempt, but the job is over: never left "submitted"
            writer.discard()
            self.journal.update(a, state="failed", reason=f"harvesting failed: {type(e).__name__}: {e}"[:600])
            raise
        except BaseException:
            writer.discard()
            raise
        finally:
            shutil.rmtree(Path(self.cc.store) / LAB_DIR / "incoming" / a.key, ignore_errors=True)
        self.journal.update(a, state="harvested", reason=None)
        return True, str(path)

    def cancel_all(self) -> None:
        for job_id, entry in list(self.in_flight.items()):
            try:
                self.backend.cancel(job_id)
            except LabError as e:
                self.log(f"[yellow]could not cancel LAVA job {job_id}: {e}[/]")
            self.journal.update(entry["attempt"], state="canceled", reason="abtest was interrupted")
        self.in_flight.clear()


def collect_lab(cc: CollectConfig, backend=None, log: Callable[[str], None] | None = None) -> dict:
    """Run the plan through the lab. Returns {"done", "skipped", "retries", "failed": [...],
    "iterations": [...], "jobs": [{"job_id", "label", "workload", "iteration", "attempt", "state", "reason",
    "device", "queue_s", "job_s"}], "devices": {label: {device: count}}, "warnings": [...]}. Raises CollectError on
    unusable input, LabError
    when the lab refuses the jobs; KeyboardInterrupt propagates after canceling the jobs in flight."""
    console, log = console_and_log(log)
    if cc.lab is None:
        raise CollectError("collect_lab needs the [lab] table (CollectConfig.lab)")
    check_supported(cc)
    plan, done_already = checked_plan(cc, alternate=True)
    store = Path(cc.store)
    journal = Journal(store)
    if (done_already or journal.exists) and not cc.resume:
        raise CollectError(
            f"{store} already holds this lab collection ({len(done_already)} of {len(plan)} "
            f"iterations complete{', a journal in ' + str(journal.path) if journal.exists else ''}): "
            f"pass --resume to continue it, or choose another --store"
        )
    try:  # STORE/.lab: ours, 0700, never through a symlink (uploads, the journal and lava-run live there)
        lab_dir(store, "incoming")
    except UnsafePathError as e:
        raise CollectError(f"{store}: {e}") from e
    if journal.exists:
        journal.load()
    journal.lab = cc.lab.describe()
    discard_interrupted(store, log)
    token = load_token(cc.lab)
    backend = backend or make_backend(cc.lab, token, lab_dir(store, "lava-run"))
    receiver = None
    if cc.lab.artifacts == "upload" or cc.lab.image_transport == "http":
        receiver = ArtifactReceiver(
            lab_dir(store, "incoming"),
            bind=cc.lab.receiver_bind,
            port=cc.lab.receiver_port,
            public_url=cc.lab.upload_url,
            max_file_bytes=int(cc.lab.max_artifact_mb * (1 << 20)),
            log=log,
        ).start()
    run = _Run(cc, backend, receiver, journal, log)
    summary: dict = {
        "done": 0,
        "skipped": len(done_already),
        "retries": 0,
        "failed": [],
        "iterations": [],
        "jobs": [],
        "devices": {},
        "warnings": [],
    }
    todo = [p for p in plan if p not in done_already]
    progress = progress_bar(console, cc.progress, eta=False)
    try:
        run.prepare_images()
        if receiver:
            log(f"artifact receiver on {receiver.bind}:{receiver.port} (devices use {receiver.public_url})")
        max_in_flight = cc.lab.max_in_flight
        if not max_in_flight:
            try:
                n = len(backend.matching_devices(cc.lab.device_type, cc.lab.tags))
            except LabError as e:
                raise LabError(f"cannot list the lab's {cc.lab.device_type} devices: {e}") from e
            if n == 0:
                raise LabError(
                    f"{cc.lab.url}: no usable device of type {cc.lab.device_type!r}"
                    f"{' with tags ' + ', '.join(cc.lab.tags) if cc.lab.tags else ''}"
                )
            max_in_flight = 2 * n
        # --resume: jobs the journal lists as still in the lab are polled again, not resubmitted
        todo_slots = {(p.label, p.workload, p.iteration) for p in todo}
        for a in journal.pending():
            if a.slot in todo_slots:
                try:
                    backend.status(a.job_id)
                except LabUnavailable:
                    pass  # polled again in the loop
                except LabError as e:
                    journal.update(a, state="lost", reason=str(e))
                    continue
                definition = _definition_of(backend, a.job_id)
                run.in_flight[a.job_id] = {
                    "attempt": a,
                    "definition": definition,
                    "script": gs.script_from_definition(definition),
                    "upload": "",
                }
            else:
                journal.update(a, state="canceled", reason="not part of this plan")
        busy = {e["attempt"].slot for e in run.in_flight.values()}
        queue = [p for p in todo if (p.label, p.workload, p.iteration) not in busy]
        outstanding = set(todo_slots)
        with progress:
            task = progress.add_task("lab", total=len(plan), completed=len(done_already))
            while outstanding:
                while queue and len(run.in_flight) < max_in_flight:
                    step = queue.pop(0)
                    if len(journal.failures((step.label, step.workload, step.iteration))) > cc.lab.retries:
                        continue
                    try:
                        run.submit(step)
                    except LabUnavailable as e:
                        log(f"[yellow]lab unavailable, will retry: {e}[/]")
                        queue.insert(0, step)
                        break
                for job_id in list(run.in_flight):
                    try:
                        status = backend.status(job_id)
                        if not status.finished:
                            continue
                        a = run.in_flight[job_id]["attempt"]
                        ok, detail = run.harvest_one(job_id, status)
                    except LabUnavailable as e:
                        log(f"[yellow]polling job {job_id}: {e}[/]")
                        continue
                    except LabError as e:  # the lab no longer knows the job (deleted, ...): a failed attempt
                        a = run.in_flight.pop(job_id)["attempt"]
                        journal.update(a, state="failed", reason=str(e))
                        status, ok, detail = JobStatus(job_id, "Finished", "Unknown"), False, str(e)
                    summary["jobs"].append(
                        {
                            "job_id": job_id,
                            "label": a.label,
                            "workload": a.workload,
                            "iteration": a.iteration,
                            "attempt": a.attempt,
                            "state": "harvested" if ok else "failed",
                            "reason": None if ok else detail,
                            "device": status.device,
                            "queue_s": status.seconds("submit_time", "start_time"),
                            "job_s": status.seconds("start_time", "end_time"),
                        }
                    )
                    if ok:
                        summary["done"] += 1
                        summary["iterations"].append(detail)
                        dev = summary["devices"].setdefault(a.label, {})
                        dev[status.device or "?"] = dev.get(status.device or "?", 0) + 1
                        outstanding.discard(a.slot)
                        progress.advance(task)
                        continue
                    failures = journal.failures(a.slot)
                    if len(failures) > cc.lab.retries:
                        log(
                            f"[red]{a.label}/{a.workload}/{a.iteration}: failed after {len(failures)} attempts; "
                            f"last: {detail}[/]"
                        )
                        summary["failed"].append(
                            {
                                "label": a.label,
                                "workload": a.workload,
                                "iteration": a.iteration,
                                "attempts": [{"job_id": f.job_id, "reason": f.reason} for f in failures],
                            }
                        )
                        outstanding.discard(a.slot)
                        progress.advance(task)
                    else:
                        summary["retries"] += 1
                        log(
                            f"[yellow]{a.label}/{a.workload}/{a.iteration}: job {job_id} failed ({detail}); "
                            f"resubmitting (attempt {len(failures) + 1} of {cc.lab.retries + 1})[/]"
                        )
                        queue.insert(0, PlannedIteration(a.label, a.workload, a.iteration))
                states = [e["attempt"] for e in run.in_flight.values()]
                progress.update(
                    task,
                    description=f"lab: {len(states)} in the lab, {len(queue)} to submit, "
                    f"{summary['done']} done, {len(summary['failed'])} failed",
                )
                if outstanding:
                    time.sleep(cc.lab.poll_s)
    except BaseException:
        run.cancel_all()
        raise
    finally:
        if receiver:
            receiver.stop()
        backend.close()
    summary["warnings"] = device_confounding(summary["devices"])
    for w in summary["warnings"]:
        log(f"[yellow]warning: {w}[/]")
    return summary


def device_confounding(devices: dict[str, dict[str, int]]) -> list[str]:
    """A warning when labels ran on disjoint sets of devices (more than one device in all): then a
    difference between the labels cannot be told from a difference between the devices. The lab hands
    queued jobs to whichever device frees first, so alternating the submission order does not prevent
    it; pin a label-independent device with [lab] tags, or read the per-device split in meta.json."""
    sets = {label: set(d) for label, d in devices.items() if d}
    if len(sets) < 2 or len(set().union(*sets.values())) < 2:
        return []
    labels = sorted(sets)
    if any(sets[a] & sets[b] for i, a in enumerate(labels) for b in labels[i + 1 :]):
        return []
    split = "; ".join(f"{label}: {', '.join(sorted(sets[label]))}" for label in labels)
    return [
        f"every label ran on its own devices ({split}): device differences are confounded with the "
        f"labels; pin one device with [lab] tags or collect more iterations"
    ]


def _definition_of(backend, job_id: int) -> str:
    try:
        return backend.definition(job_id) if hasattr(backend, "definition") else ""
    except LabError:
        return ""
