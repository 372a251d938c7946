"""`python -m evalpipe ...`: the same command line as `evalpipe ...`, so launchers
that start modules (`accelerate launch -m evalpipe run ...`, torchrun -m) work."""

from evalpipe.cli import main

if __name__ == "__main__":
    main(prog_name="evalpipe")
