from ctxd.cli import main

raise SystemExit(main())
