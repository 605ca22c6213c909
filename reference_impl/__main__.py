"""``python -m reference_impl`` runs the ``seqpack`` CLI."""

from reference_impl.cli import main

raise SystemExit(main())
