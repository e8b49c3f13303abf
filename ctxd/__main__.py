from ctxd.entry import main

raise SystemExit(main())
