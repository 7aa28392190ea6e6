from hetero_exporter.cli import main

raise SystemExit(main())
