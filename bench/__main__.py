"""`python -m bench`: the one command that starts, measures, reports and stops everything."""

import sys

if __name__ == "__main__":
    if "--part5" in sys.argv:  # on a CUDA host, where only vLLM, Triton and the gateway's needs are installed
        from bench.gpu_host.run import main
    else:
        from bench.run import main
    main()
