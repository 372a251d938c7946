"""`python -m evalpipe.cli` works as `python -m evalpipe` does."""

from evalpipe.cli import main

if __name__ == "__main__":
    main(prog_name="evalpipe")
