"""``python -m workers`` runs the wm-signals CLI (the same entry point as ``wm-signals``)."""

from workers.entry import main

raise SystemExit(main())
