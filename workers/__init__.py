"""wm-signals worker processes and CLI."""
