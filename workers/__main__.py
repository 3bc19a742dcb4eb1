"""``python -m workers`` runs the wm-signals CLI."""

from workers.cli.app import main

raise SystemExit(main())
