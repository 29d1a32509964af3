"""PyTorch's own torch.distributed test cases (distributed_test.py's
DistributedTest._DistTestBase) against the "ciuic" backend, run the way
torch's test/distributed/test_distributed_spawn.py runs them for gloo, with
"ciuic" declared a plugin backend as torch_ucc's test driver does for ucc.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 \\
        python3 -m pytest -q -rs python/tests/torch_dist_suite.py -k test_all_reduce_sum

CTest runs all of it on ciuic at 2 ranks (python_torch_suite, ~1 min on
2 cores; ~13 min with CIUIC_SUITE_START=spawn); -k selects. What torch
skips for every backend but gloo (or a GPU), and what ciuic refuses by
design, is skipped with the reason (-rs).
Environment (each with a default):
    BACKEND       ciuic (or gloo, to compare; any other is refused)
    WORLD_SIZE    2
    TEMP_DIR      a fresh directory with barrier/ and test_dir/ in it
    INIT_METHOD   file://$TEMP_DIR/ (torch's "with file init_method" run;
                  env:// gives the NoInitFile class name). Every test's own
                  process group is initialised from a fresh file:// store by
                  TestDistBackend, whatever this says.
    CIUIC_SUITE_ANYSOURCE=1  runs the recv-from-any-source tests on ciuic,
                  which the backend refuses by design (skipped otherwise).
    CIUIC_SUITE_GPU_FEATURE=0|1  whether ciuic joins backend_feature["gpu"];
                  default 1 when no CUDA device is visible: those tests then
                  run their CPU paths for gloo, and so for ciuic.
    CIUIC_SUITE_START=forkserver|spawn  how each test's ranks start. spawn is
                  torch's way: every rank imports torch and its test modules
                  afresh (~2.5 s of CPU each, most of a test's time on 2
                  cores). forkserver (the default without a GPU) forks them
                  from one server that imported this module once, so ranks
                  are still fresh processes without pytest's threads; each
                  gets the environment of the test that starts it.
"""

import atexit
import multiprocessing
import multiprocessing.context
import os
import shutil
import sys
import tempfile
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))

# (2) the environment, before torch's test modules read it at import. The
# spawned ranks import this module again and inherit what is set here.
os.environ.setdefault("BACKEND", "ciuic")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="ciuic_dist_suite_")
    atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], True)  # this process made it
for _sub in ("barrier", "test_dir"):
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], _sub), exist_ok=True)
os.environ.setdefault("INIT_METHOD", "file://" + os.environ["TEMP_DIR"] + "/")

BACKEND = os.environ["BACKEND"]
if BACKEND not in ("ciuic", "gloo"):
    raise RuntimeError(f"torch_dist_suite.py: BACKEND={BACKEND!r}; expected ciuic or gloo")

try:
    import torch  # noqa: E402
    import torch.distributed as dist  # noqa: E402
except ImportError as _e:
    import pytest

    pytest.skip(f"torch is not installed: {_e}", allow_module_level=True)

torch.backends.cuda.matmul.allow_tf32 = False

# (1) register the backend (here and, by this import, in every spawned rank)
try:
    import ciuic.torch  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(_HERE, "..", "..", "build", "python"))
    try:
        import ciuic.torch  # noqa: F401
    except ImportError as _e:
        import pytest

        pytest.skip(f"the torch backend is not built: {_e}", allow_module_level=True)
ciuic.torch.register()

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# (3) what ciuic implements on CPU as gloo does. skip_collective lists what it
# does not: recv from any source is refused by the backend (documented).
DistTestCases.backend_feature["plugin"].add("ciuic")
DistTestCases.backend_feature["ddp"].add("ciuic")
DistTestCases.backend_feature["subgroup"].add("ciuic")
_gpu_feature = os.environ.get("CIUIC_SUITE_GPU_FEATURE")
if (_gpu_feature == "1") if _gpu_feature is not None else not torch.cuda.is_available():
    DistTestCases.backend_feature["gpu"].add("ciuic")
# "cuda" (DDP comm hooks on CUDA devices) stays gloo's: ciuic takes CPU tensors.
if os.environ.get("CIUIC_SUITE_ANYSOURCE") != "1":
    DistTestCases.skip_collective["sendrecv anysource"].add("ciuic")

# After DistTestCases is set: its decorators read it when the class is made.
from torch.testing._internal.common_utils import (  # noqa: E402
    NO_MULTIPROCESSING_SPAWN,
    TEST_WITH_DEV_DBG_ASAN,
    run_tests,
)
from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402

if TEST_WITH_DEV_DBG_ASAN or NO_MULTIPROCESSING_SPAWN:
    raise RuntimeError("torch_dist_suite.py needs multiprocessing spawn (and no dev-asan)")


# A server that touched CUDA (torch's test modules ask whether it is there)
# cannot fork ranks that use it: with a GPU, spawn.
_START = os.environ.get("CIUIC_SUITE_START") or ("spawn" if torch.cuda.is_available() else "forkserver")
if _START not in ("forkserver", "spawn"):
    raise RuntimeError(f"torch_dist_suite.py: CIUIC_SUITE_START={_START!r}; expected forkserver or spawn")


class _ForkServerProcess(multiprocessing.context.ForkServerProcess):
    """A rank forked from the server, with the environment of the test that
    starts it: torch sets TEMP_DIR and INIT_METHOD per test in the parent,
    and a fork of the server would otherwise see the server's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ciuic_env = dict(os.environ)

    def run(self):
        os.environ.clear()
        os.environ.update(self._ciuic_env)
        # distributed_test reads INIT_METHOD once, at import (the server's).
        _dt.INIT_METHOD = os.environ.get("INIT_METHOD", "env://")
        super().run()


def _forkserver_context():
    ctx = multiprocessing.get_context("forkserver")
    # The server imports this module (and so torch, the backend and torch's
    # test modules) once; each rank is then a fork of it.
    ctx.set_forkserver_preload([__name__])
    # The server starts with this environment and "-c", so it finds this
    # module by PYTHONPATH (it does not apply pytest's sys.path), and an
    # import error there is silent: the ranks would import it all again.
    path = os.environ.get("PYTHONPATH", "")
    if _HERE not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_HERE, path) if p)
    return ctx


# (4) the test class, as test_distributed_spawn.py makes it
def make_test_classes():
    class TestDistBackendWithSpawn(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            if _START == "spawn":
                self._spawn_processes()
            else:
                _forkserver_context()
                self._start_processes(_ForkServerProcess)
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    has_init_method = "NoInitFile" if os.environ.get("INIT_METHOD", "env://") == "env://" else ""
    TestDistBackendWithSpawn.__name__ = f"TestDistBackendWithSpawn{BACKEND.upper()}{has_init_method}"
    TestDistBackendWithSpawn.__qualname__ = TestDistBackendWithSpawn.__name__
    if BACKEND == "ciuic":
        # DDP's logger reads ProcessGroup::getBackendName(), which torch
        # answers with "custom" for every plugin backend (torch_ucc's driver
        # skips it for ucc too).
        TestDistBackendWithSpawn.test_ddp_logging_data_cpu = unittest.skip(
            "torch names every plugin backend 'custom' in DDP's logging data")(
            TestDistBackendWithSpawn.test_ddp_logging_data_cpu)
    globals()[TestDistBackendWithSpawn.__name__] = TestDistBackendWithSpawn
    return TestDistBackendWithSpawn


make_test_classes()

if __name__ == "__main__":
    run_tests()
