"""`python -m bench.soak` (`make soak`)."""

from bench.soak.run import main

if __name__ == "__main__":
    main()
