"""`python -m execd` is the `execd` command."""

from execd.cli.main import main

raise SystemExit(main())
