"""abtest's findings on a timeline: a trace's scheduling data and abtest's derived signals written as one
perfetto trace for the Perfetto UI (docs/timeline.md)."""
