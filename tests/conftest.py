"""Shared test fixtures."""

import os
import subprocess
from pathlib import Path

import pytest
from tests.support import forkserver as _forkserver
from tests.support.margins import Margins

# Under pytest-xdist each worker gets its share of the cores as its thread count (and the
# commands the tests start inherit it): two workers of two OpenMP threads on two cores stall
# every product. `tests/portability.sh` sets the count itself (GAUGELAB_TEST_THREADS).
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    share = str(max(1, (os.cpu_count() or 1) // int(workers)))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, os.environ.get("GAUGELAB_TEST_THREADS", share))
elif threads := os.environ.get("GAUGELAB_TEST_THREADS"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads


@pytest.fixture(scope="session")
def shakespeare(tmp_path_factory) -> Path:
    """Path of a plain-text tinyshakespeare.txt: the packaged copy (digest checked), written
    once per session to a temporary folder."""
    from gaugelab.tasks import tiny_shakespeare_bytes

    path = tmp_path_factory.mktemp("data") / "tinyshakespeare.txt"
    path.write_bytes(tiny_shakespeare_bytes())
    return path


@pytest.fixture(scope="session")
def forkserver(tmp_path_factory) -> dict[str, str]:
    """The environment that sends ``tests.support.forkserver.CLIENT`` commands to this worker's
    fork server (started on first use): the docs pages and golden commands run through it and
    import torch once, not once a command."""
    with _forkserver.started(tmp_path_factory.mktemp("forkserver")) as env:
        yield env


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures(...)``).

    Tiny problems: one torch thread is faster, and immune to a busy machine (a second OpenMP
    thread waiting for a taken core stalls every product). Module-scoped, so the module's own
    module-scoped fixtures (a shared study run once) compute on one thread too; the previous
    thread count is restored after the module. ``tests/portability.sh`` sets the count through
    ``$GAUGELAB_TEST_THREADS``, to measure the module's thresholds on 1 and 2 threads.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("GAUGELAB_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(before)


def _strict_dtypes_mode():
    """A ``TorchFunctionMode`` that refuses silent float32↔float64 promotion (see below)."""
    import torch
    from torch.overrides import TorchFunctionMode, resolve_name

    casts = {
        torch.Tensor.to,
        torch.Tensor.type,
        torch.Tensor.type_as,
        torch.Tensor.double,
        torch.Tensor.float,
        torch.Tensor.half,
        torch.Tensor.bfloat16,
        torch._has_compatible_shallow_copy_type,  # these two inside nn.Module.to(dtype)
        torch.Tensor.data.__set__,
    }

    def floating(values, out):
        for v in values:
            if isinstance(v, torch.Tensor):
                if v.is_floating_point():
                    out.append(v)
            elif isinstance(v, list | tuple):
                floating(v, out)
        return out

    def mixed(tensors):
        # torch's rule: 0-dim tensors take part only when no dimensioned tensor does
        participants = [t for t in tensors if t.dim() > 0] or tensors
        return sorted({str(t.dtype) for t in participants}) if participants else []

    class StrictDtypes(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func not in casts:
                values = (*args, *kwargs.values())
                name = getattr(func, "__name__", "")
                if name.startswith("_foreach_"):  # lists pair up position by position
                    lists = [v for v in values if isinstance(v, list | tuple)]
                    single = [v for v in values if not isinstance(v, list | tuple)]
                    width = max((len(x) for x in lists), default=0)
                    groups = [[x[i] for x in lists if i < len(x)] + single for i in range(width)]
                else:
                    groups = [values]
                for group in groups:
                    dtypes = mixed(floating(group, []))
                    # RuntimeError, not TypeError: Tensor.__add__ turns a TypeError into
                    # NotImplemented and Python then reports a bare "unsupported operand"
                    if len(dtypes) > 1:
                        raise RuntimeError(
                            f"strict_dtypes: {resolve_name(func) or func!r} got floating tensors "
                            f"of dtypes {', '.join(dtypes)}; silent promotion is refused in this "
                            "test: cast explicitly (.to(dtype), .double(), .float())"
                        )
            return func(*args, **kwargs)

    return StrictDtypes()


@pytest.fixture
def margin(request) -> Margins:
    """``margin.below(name, value, bound)`` / ``.above``: a fixed threshold on a measured float,
    recorded for ``tests/portability.sh`` (see :mod:`tests.support.margins`)."""
    return Margins(request.node.nodeid)


@pytest.fixture
def strict_dtypes():
    """Fail on silent float32↔float64 promotion inside the test (Equinox's strict mode).

    While the test runs, any torch function or tensor method that receives floating tensors of
    different dtypes raises ``RuntimeError`` — binary ops, ``torch.cat``, ``copy_``, indexed
    assignment, ``_foreach_*`` lists (paired by position). Allowed: Python scalars, 0-dim
    tensors beside dimensioned ones (they do not promote, as in torch's rules), integer and
    bool tensors, and explicit casts (``.to``, ``.type``, ``.type_as``, ``.double``, ``.float``,
    ``.half``, ``.bfloat16``, ``nn.Module.to``). Use it with
    ``pytestmark = pytest.mark.usefixtures("strict_dtypes")`` in float64 identity modules.
    """
    with _strict_dtypes_mode():
        yield


def pytest_configure(config):
    """Under ``--dist loadgroup`` pytest-xdist hands out the groups in the order of
    :func:`pytest_collection_modifyitems` below (the long tests first), not sorted by how many
    tests a group has: by count, the golden commands (one test each, up to a minute or more)
    were handed out after every module of several tests, last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n`` (``--dist loadgroup``, the default), the tests that share a module- or
    class-scoped fixture (a study run once for its module) run on one worker, so the fixture is
    built once; every other test goes wherever a worker is free. A test module can name a group
    itself with ``pytest.mark.xdist_group`` (the Ray tests share one: two Ray clusters at once
    on two cores starve each other).

    A test that takes the ``margin`` fixture compares a measured float with a fixed threshold:
    it is marked ``portability`` (``tests/portability.sh``). The tests marked ``slow`` are
    collected first."""
    for item in items:
        if "margin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.portability)
    _refuse_unlisted_portability_tests(items)
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        defs = getattr(item, "_fixtureinfo", None)
        shared = defs is not None and any(
            fixture[-1].scope in ("module", "class", "package")
            for fixture in defs.name2fixturedefs.values()
        )
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    # the long tests first (a stable sort: the same order on every worker), so that no worker
    # is left with a golden chain or a docs page while the other has run out of work
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _refuse_unlisted_portability_tests(items) -> None:
    """``tests/portability.sh`` collects only the files it lists (``--list``); a test marked
    ``portability`` in another file would silently miss its CPU variations."""
    files = {Path(i.path) for i in items if i.get_closest_marker("portability")}
    if not files:
        return
    root = Path(__file__).parent.parent
    listed = subprocess.run(
        ["bash", "tests/portability.sh", "--list"], cwd=root, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    missed = sorted(str(f.relative_to(root)) for f in files - {root / p for p in listed})
    if missed:
        raise pytest.UsageError(
            f"tests marked portability in {missed}, which tests/portability.sh --list does not "
            "name: it finds the files that name the margin fixture"
        )


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Refuse to run when pytest-xdist's grouping silently does nothing (pytest-xdist#1386:
    with pytest 9.2 a worker's group suffix is lost, and a docs page would run on two workers)."""
    if not getattr(session.config, "workerinput", None) or not session.config.option.loadgroup:
        return
    grouped = [i for i in session.items if i.get_closest_marker("xdist_group")]
    if grouped and "@" not in grouped[0].nodeid:
        raise pytest.UsageError(
            "pytest-xdist's --dist loadgroup is not honoured by this pytest "
            f"({pytest.__version__}); install the test extra's pytest (<9.2)"
        )
