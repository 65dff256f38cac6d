"""The LAVA job definition of one attempt (label x workload x iteration, attempt n).

    job_name: abtest kernelA/hackbench/1 (attempt 1)
    device_type: qemu
    context: {arch: amd64, model: model=e1000}      # QEMU recipe: the NIC abtest's initramfs drives
    metadata: {abtest.label: kernelA, abtest.workload: hackbench, abtest.iteration: 1, abtest.key: ...}
    actions:
    - deploy: {to: tmpfs, images: {kernel: {url, image_arg: -kernel {kernel} -append "..."},
                                   ramdisk: {url, image_arg: -initrd {ramdisk}}}}
    - boot: {method: qemu, media: tmpfs, prompts: ["abtest# "]}
    - test: {interactive: [{name: abtest, prompts: ["abtest# "], script: [
        {command: "rm -f ..."}, {command: "echo <base64> >> ..."}, ...,
        {command: "base64 -d ... && sh /tmp/abtest-job.sh", name: iteration,
         successes: [{message: "ABTEST-END status=ok"}], failures: [{message: "ABTEST-END status=error"}]}]}]}

Other device types take the label's `deploy` and `boot` actions verbatim from [lab.actions.<label>]; the
test action is the same. `interactive` tests need no LAVA overlay (LAVA's test-shell overlay for QEMU
tmpfs needs libguestfs, which cannot build its appliance on every worker).
The definition is YAML text (what LAVA stores and shows); `redact` hides the upload token in copies
kept in the store.
"""

from __future__ import annotations

import re

import yaml

from abtest.collectors.lab.config import LabConfig
from abtest.collectors.lab.images import BootImages

ITERATION_CASE = "iteration"
# job context of the QEMU recipe: x86-64, and the e1000 NIC (the one module abtest's initramfs loads)
QEMU_CONTEXT = {"arch": "amd64", "model": "model=e1000"}
TEST_NAME = "abtest"


def qemu_actions(images: BootImages, kernel_url: str, ramdisk_url: str, cfg: LabConfig) -> tuple[dict, dict]:
    """deploy + boot actions of the QEMU recipe (tmpfs: kernel and ramdisk passed to qemu-system)."""
    deploy = {
        "to": "tmpfs",
        "timeout": {"minutes": cfg.boot_timeout_min},
        "images": {
            "kernel": {"url": kernel_url, "image_arg": f'-kernel {{kernel}} -append "{images.cmdline}"'},
            "ramdisk": {"url": ramdisk_url, "image_arg": "-initrd {ramdisk}"},
        },
    }
    boot = {"method": "qemu", "media": "tmpfs", "timeout": {"minutes": cfg.boot_timeout_min}, "prompts": [cfg.prompt]}
    return deploy, boot


def job_definition(
    cfg: LabConfig,
    *,
    label: str,
    workload: str,
    iteration: int,
    attempt: int,
    key: str,
    deploy: dict,
    boot: dict,
    commands: list[str],
    test_timeout_min: int,
    qemu_context: bool,
) -> str:
    """YAML text of the job. `commands`: the console commands of guest_script.delivery_commands (the
    last one runs the iteration and prints the ABTEST-END line LAVA waits for)."""
    script = [{"command": c} for c in commands[:-1]]
    script.append(
        {
            "command": commands[-1],
            "name": ITERATION_CASE,
            "successes": [{"message": "ABTEST-END status=ok"}],
            "failures": [{"message": "ABTEST-END status=error"}],
        }
    )
    job = {
        "job_name": f"abtest {label}/{workload}/{iteration} (attempt {attempt})",
        "device_type": cfg.device_type,
        "visibility": cfg.visibility,
        "priority": cfg.priority,
        "timeouts": {
            "job": {"minutes": cfg.job_timeout_min},
            "action": {"minutes": max(cfg.boot_timeout_min, test_timeout_min)},
            "connection": {"minutes": max(2, test_timeout_min)},
        },
        "metadata": {
            "abtest.label": label,
            "abtest.workload": workload,
            "abtest.iteration": iteration,
            "abtest.attempt": attempt,
            "abtest.key": key,
        },
        "actions": [
            {"deploy": deploy},
            {"boot": boot},
            {
                "test": {
                    "timeout": {"minutes": test_timeout_min},
                    "interactive": [{"name": TEST_NAME, "prompts": [cfg.prompt], "script": script}],
                }
            },
        ],
    }
    if cfg.tags:
        job["tags"] = list(cfg.tags)
    if qemu_context:
        job["context"] = dict(QEMU_CONTEXT)
    return yaml.safe_dump(job, sort_keys=False, width=1 << 16)


_UPLOAD_TOKEN = re.compile(r"(/upload/)[0-9a-f]{32}")


def redact(text: str) -> str:
    """The definition with upload tokens replaced (for copies kept in the store)."""
    return _UPLOAD_TOKEN.sub(r"\1<token>", text)
