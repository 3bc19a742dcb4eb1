"""wm-signals library."""
