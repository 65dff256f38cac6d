"""Presentation of comparisons: terminal (rich), markdown, JSON, and a self-contained HTML report.

Submodules:
  header    report header rows (kernel, hardware, workload, iterations, test conditions) from meta.json
  terminal  rich tables
  markdown  pipe tables
  figures   matplotlib figures (per-iteration dot plots with CIs, power per channel, residency side by side)
  html      one HTML file with the tables and figures embedded as base64 PNG
"""
