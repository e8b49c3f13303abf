from ctxd.entry import main

if __name__ == "__main__":  # (a worker process that imports it again, spawned, runs nothing)
    raise SystemExit(main())
