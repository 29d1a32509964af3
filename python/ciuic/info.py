"""python3 -m ciuic.info [--format table|json] [--algorithms]: what the
ciuic-info tool prints (version, build options, SIMD targets, caches, every
CIUIC_* knob with its value and source)."""

import sys

from . import _ciuic


def main(argv=None):
    sys.stdout.flush()
    args = list(sys.argv[1:] if argv is None else argv)
    return _ciuic.info_main(["ciuic-info"] + args)


if __name__ == "__main__":
    sys.exit(main())
