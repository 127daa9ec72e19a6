"""`python -m bench`: the one command that starts, measures, reports and stops everything."""

from bench.run import main

if __name__ == "__main__":
    main()
