"""Collect A/B runs through a LAVA lab (Linaro Automated Validation Architecture) into the run store.

    abtest collect --target T.toml --lab http://lava.example.org/ --kernel kernelA --kernel kernelB ...

One LAVA job per label x workload x iteration attempt: deploy the label's kernel and test image, boot,
run the iteration script (target description, ftrace, optional power sampling, the workload between
trace markers) in an `interactive` test action, and send the outputs back. Jobs go to the lab through
its REST API (or to a local `lava-run`, the dispatcher alone), A and B interleaved; each finished job
becomes an ordinary iteration directory (trace.dat, power.csv, metrics.json, meta.json with the LAVA job
id, device, worker and lab URL, `.complete` last). Failed or incomplete jobs are retried a bounded number
of times and reported, never mixed in.

Modules, in the order data flows:
- config.py        the `[lab]` table of a target file / `--lab URL`; the API token (env var or file)
- images.py        the QEMU recipe's boot images: the qemu target's Debian kernel and initramfs, plus a
                   console overlay giving LAVA a shell prompt
- guest_script.py  the shell script one iteration runs on the device, and the commands that deliver it
- job.py           the LAVA job definition of one attempt
- receiver.py      the HTTP receiver the devices upload artifacts to (size limits, sha256) and fetch
                   images from
- backends.py      LAVA server (REST API v0.2) and local `lava-run`, one interface
- lava_log.py      LAVA job logs -> target console lines -> what the iteration script reported
- harvest.py       a finished job + its artifacts -> one run-store iteration
- journal.py       what was submitted (for --resume)
- collect.py       the loop: submit interleaved, poll with progress, retry, harvest

How to point abtest at a lab, what a job looks like and how artifacts return: docs/lab.md.
"""
