"""The examples (examples/python/) under ciuic-run -n 2: each must exit 0
(its own check of the results) and print what it measured."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")
RUN = os.environ.get("CIUIC_TEST_RUN", "")

pytestmark = pytest.mark.skipif(not os.path.exists(RUN), reason="CIUIC_TEST_RUN (the ciuic-run binary) is not set")


@pytest.mark.parametrize("name,expect", [
    ("tip1_fusion.py", "fusion speed-up"),
    ("tip2_async.py", "ms hidden"),
    ("tip3_backend.py", "gathered [0, 1]"),
    ("tip4_buffer_size.py", "reduce 8 MiB"),
    ("tip5_mixed_precision.py", "all-reduce bfloat16"),
    ("partition_work.py", "by complexity"),
])
def test_example_runs_on_two_ranks(name, expect):
    env = dict(os.environ)
    env.pop("CIUIC_RANK", None)
    out = subprocess.run([RUN, "-n", "2", sys.executable, os.path.join(EXAMPLES, name)], capture_output=True,
                         text=True, timeout=300, env=env)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert expect in out.stdout, out.stdout
    assert "#wrong 0" in out.stdout
