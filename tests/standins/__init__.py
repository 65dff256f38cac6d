"""Servers the end-to-end tests start. adb_device.py is a STAND-IN (no Android exists here);
local_sshd.py starts the real OpenSSH sshd."""
