"""``python -m seqpack`` runs the ``seqpack`` CLI."""

from seqpack.faces.cli import main

raise SystemExit(main())
