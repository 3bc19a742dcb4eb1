"""``python -m workers`` runs the wm-signals CLI."""

from workers.cli import main

raise SystemExit(main())
