"""`python -m protocol.codegen [SPEC_DIR] [--out DIR]` — regenerates the protocol codecs
(SPEC_DIR defaults to protocol/spec, Kafka's message definitions kept in the repository)."""
import argparse
from pathlib import Path

from . import generate, write

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m protocol.codegen", description=__doc__)
    parser.add_argument("spec_dir", nargs="?", default=str(SPEC_DIR),
                        help="folder with messages/, internal-records/, errors.tsv "
                             "(default: protocol/spec)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent),
                        help="output package folder (default: the protocol package itself)")
    args = parser.parse_args(argv)
    files = generate(args.spec_dir)
    write(files, args.out)
    print(f"generated {len(files)} files into {args.out}")


if __name__ == "__main__":
    main()
