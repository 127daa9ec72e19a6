"""`python -m bench.overload` (`make overload`)."""

from bench.overload.run import main

if __name__ == "__main__":
    main()
