"""pytest plugin: each cell of a pacheck suite as one parametrised test, with the cell id as its test id.

    import pacheck.pytest_plugin as pp
    from my_kernels import my_kernel              # a pacheck.Kernel

    @pp.cells("gate", my_kernel)
    def test_my_kernel(pacheck_cell):
        pacheck_cell.check()                       # runs the cell; fails with the verdict, skips a decline

Loaded by the pytest11 entry point of an installed pacheck, or with `-p pacheck.pytest_plugin`. Test ids
are the cell ids ("test_my_kernel[h32/8 d128 bs16 bf16 ctx4090 nhd seed7 V:nan@tail]"), so `-k 'ctx4090 and
V:nan'`, `-x`, `--junitxml` and xdist (`-n`) work as usual (-k matches words with and/or/not and has no
'=': the window cells are `-k 'win and not qlen'`, never `-k 'win='`); each test's junit <testcase> carries the properties
pacheck_cell_id and (once the cell ran) pacheck_verdict, in xunit1 and xunit2. A failing cell's message gives
the verdict, the worst element, the repro line (`pacheck repro`, or for a Python kernel without a
repro_label the pacheck.run_cell call) and a `rerun:` pytest command that works pasted in the directory pytest
was started in, and the session's summary lists the failing cells' rerun commands; a declined cell is skipped with the kernel's reason. A marker whose suite
does not load (or whose test lacks the pacheck_cell argument) is a collection error naming the test, the
suite and the known suites. Before the
first cell, the comparator self-test and pacheck's CPU negative controls run once per suite in the session
(once per xdist worker; not for --collect-only): when pacheck is blind every cell test fails and the session
exits with code 3 (under xdist the workers' cells fail, and pytest's own exit code 1 is what the controller
returns).

Options: --pacheck-suite NAME runs every marked test over NAME instead of its marker's suite (gate in CI,
sweep on a GPU machine, same test file); --pacheck-device DEV overrides the device ("cuda:1"); an empty
value of either is a usage error;
--pacheck-no-instrument leaves the instrument check out (a quick -k rerun; say so wherever it is used).
"""
import pytest

import pacheck

_MARK = "pacheck"
_FIXTURE = "pacheck_cell"


def cells(suite, kernel, device=None):
    """Decorator: parametrise the test over the cells of `suite` on `kernel` (a pacheck.Kernel or a
    registered kernel's name); the test takes the `pacheck_cell` argument (a Cell). `device` defaults to the
    kernel's own ("cpu" / "cuda")."""
    return pytest.mark.pacheck(suite=suite, kernel=kernel, device=device)


class Cell:
    """One cell of a parametrised test: id, info (pacheck.CellInfo), the suite, kernel and device it runs on."""

    def __init__(self, suite, kernel, device, info, nodeid=None):
        self.suite, self.kernel, self.device, self.info = suite, kernel, device, info
        self.id = info.id
        self.nodeid = nodeid
        self.rerun = None  # the shell command that reruns this test (set when the test is set up)
        self.result = None

    def __repr__(self):
        return f"pacheck_cell({self.id!r})"

    def run(self):
        """Runs the cell (pacheck.run_cell) and returns its pacheck.CellResult; no assertion."""
        self.result = pacheck.run_cell(self.suite, self.kernel, self.id, self.device)
        return self.result

    def check(self):
        """Runs the cell: pytest.skip when the kernel declines it, pytest.fail with the verdict, the worst
        element and the repro line when it fails (a negative control's caught cell passes). Returns the
        pacheck.CellResult."""
        r = self.run()
        if r.declined:
            pytest.skip(f"declined: {r.detail}")
        if r.failed:
            msg = r.message()
            if self.rerun:
                msg += f"\nrerun: {self.rerun}"
            pytest.fail(msg, pytrace=False)
        return r


def _rerun_command(item):
    """A shell command that reruns `item` pasted in the directory pytest was started in: the test file's path
    relative to that directory (pytest's node ids are relative to its rootdir, which may be another folder),
    `-p pacheck.pytest_plugin` when the plugin was loaded that way, and the --pacheck-suite/--pacheck-device
    given (the ids depend on the suite)."""
    import os
    import shlex
    import shutil
    import sys

    config = item.config
    path = str(getattr(item, "path", None) or item.fspath)  # item.path: pytest >= 7
    where = os.path.relpath(path, str(config.invocation_params.dir))
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    python = "python3"
    found = shutil.which("python3")
    if not found or os.path.realpath(found) != os.path.realpath(sys.executable):
        python = sys.executable or "python3"
    words = [python, "-m", "pytest"]
    args = [str(a) for a in config.invocation_params.args]
    plugin_by_p = any((a == "-p" and i + 1 < len(args) and args[i + 1] == __name__) or a == "-p" + __name__
                      for i, a in enumerate(args))
    if plugin_by_p:
        words += ["-p", __name__]
    for opt in ("--pacheck-suite", "--pacheck-device"):
        value = config.getoption(opt)
        if value:
            words += [opt, str(value)]
    words.append(f"{where}::{rest}")
    return " ".join(shlex.quote(w) for w in words)


def pytest_addoption(parser):
    g = parser.getgroup("pacheck")
    g.addoption("--pacheck-suite", default=None, help="run every pacheck-marked test over this suite")
    g.addoption("--pacheck-device", default=None, help="device for every pacheck cell (cpu, cuda, cuda:N)")
    g.addoption("--pacheck-no-instrument", action="store_true",
                help="skip the comparator self-test and negative controls (not for CI)")


def pytest_configure(config):
    config.addinivalue_line("markers", "pacheck(suite, kernel, device=None): parametrise over a suite's cells")
    # An empty value would be ignored (the marker's suite or device would run instead): refuse it.
    for opt, what in (("--pacheck-suite", "a suite name or .toml path"), ("--pacheck-device", "cpu, cuda or cuda:N")):
        value = config.getoption(opt)
        if value is not None and not str(value).strip():
            raise pytest.UsageError(f"{opt}: empty value {value!r} (give {what}, or leave the option out to use each "
                                    "test's marker)")
    config._pacheck = {"checks": {}, "blind": [], "failed_repro": []}


def _test_name(item):
    """The test's node id (path::name) for messages."""
    return getattr(item, "nodeid", None) or getattr(item, "name", "?")


def _kernel_label(kernel):
    return repr(kernel) if isinstance(kernel, pacheck.Kernel) else repr(str(kernel))


def _marker_args(metafunc_or_item, config):
    m = metafunc_or_item.get_closest_marker(_MARK)
    if m is None:
        return None
    kw = dict(m.kwargs)
    args = list(m.args)
    suite = kw.pop("suite", args.pop(0) if args else None)
    kernel = kw.pop("kernel", args.pop(0) if args else None)
    device = kw.pop("device", args.pop(0) if args else None)
    if suite is None or kernel is None:
        raise pytest.Collector.CollectError(
            f"{_test_name(metafunc_or_item)}: @pacheck.pytest_plugin.cells / pytest.mark.pacheck needs a suite and a "
            "kernel")
    suite = config.getoption("--pacheck-suite") or suite
    device = config.getoption("--pacheck-device") or device
    if device is None:
        device = kernel.device if isinstance(kernel, pacheck.Kernel) else "cpu"
    return suite, kernel, device


def pytest_generate_tests(metafunc):
    args = _marker_args(metafunc.definition, metafunc.config)
    if args is None:
        return
    name = _test_name(metafunc.definition)
    if _FIXTURE not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(f"{name}: a pacheck-marked test takes the '{_FIXTURE}' argument")
    suite, kernel, device = args
    # A collection error with the message only (pytest prints a CollectError's text without the traceback
    # through pluggy's frames), naming the test, the suite and the suites there are.
    try:
        infos = pacheck.cells(suite, kernel)
    except (pacheck.PacheckError, TypeError, ValueError) as e:
        msg = f"{name}: pacheck cells of suite {str(suite)!r} on kernel {_kernel_label(kernel)}: {e}"
        if isinstance(e, pacheck.PacheckError) and "known:" not in msg:
            try:
                msg += f" (known suites: {', '.join(pacheck.info()['suites'])})"
            except pacheck.PacheckError:
                pass
        raise pytest.Collector.CollectError(msg) from None
    metafunc.parametrize(_FIXTURE, [Cell(suite, kernel, device, i) for i in infos], ids=[i.id for i in infos])


def _instrument(config, suite):
    """The instrument check of `suite`, made once per process (session or xdist worker)."""
    checks = config._pacheck["checks"]
    if suite not in checks:
        try:
            checks[suite] = pacheck.check_instrument(suite)
        except pacheck.PacheckError as e:
            checks[suite] = pacheck.InstrumentCheck(True, f"the instrument check could not run: {e}\n")
        if checks[suite].blind:
            config._pacheck["blind"].append(suite)
    return checks[suite]


def pytest_collection_finish(session):
    """Runs the instrument check of every suite the collected tests use, before the first test."""
    config = session.config
    if config.getoption("--pacheck-no-instrument") or config.option.collectonly:
        return
    suites = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get(_FIXTURE) if callspec else None
        if isinstance(cell, Cell) and cell.suite not in suites:
            suites.append(cell.suite)
    for s in suites:
        _instrument(config, s)


def pytest_runtest_setup(item):
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get(_FIXTURE) if callspec else None
    if not isinstance(cell, Cell):
        return
    cell.nodeid = item.nodeid
    cell.rerun = _rerun_command(item)
    cell.result = None
    # On the item (not the report): pytest's junitxml writes item.user_properties, xunit1 and xunit2 alike.
    item.user_properties.append(("pacheck_cell_id", cell.id))
    c = item.config._pacheck["checks"].get(cell.suite)
    if c is not None and c.blind:
        pytest.fail(f"pacheck is blind on suite '{cell.suite}' (instrument check failed), so no verdict "
                    f"means anything:\n{c.summary}", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get(_FIXTURE) if callspec else None
    ran = isinstance(cell, Cell) and call.when == "call" and cell.result is not None
    if ran:
        # Before the report is made from the item: the call and teardown reports both carry it, and junitxml
        # writes the teardown report's user_properties into <properties>.
        item.user_properties.append(("pacheck_verdict", cell.result.verdict))
    outcome = yield
    rep = outcome.get_result()
    if ran and rep.failed:
        # The pytest command that reruns the test (pasteable where pytest was started), and the pacheck repro
        # line too when it names a loadable kernel (a built-in, a plugin, a Kernel with a repro_label).
        lines = [cell.rerun or cell.result.repro]
        if cell.rerun and cell.result.repro.startswith("pacheck repro "):
            lines.append(cell.result.repro)
        item.config._pacheck["failed_repro"].append(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    st = getattr(config, "_pacheck", None)
    if not st or not (st["checks"] or st["failed_repro"]):
        return
    tr = terminalreporter
    tr.section("pacheck")
    for suite, c in st["checks"].items():
        tr.write_line(f"instrument check, suite {suite}: {'BLIND' if c.blind else 'ok'}")
        for line in c.summary.splitlines():
            tr.write_line("  " + line)
    if st["failed_repro"]:
        tr.write_line(f"{len(st['failed_repro'])} failing cells; rerun lines (pytest, then pacheck repro where "
                      "pacheck can load the kernel):")
        for lines in st["failed_repro"]:
            for line in lines:
                tr.write_line("  " + line)


def pytest_sessionfinish(session, exitstatus):
    st = getattr(session.config, "_pacheck", None)
    if st and st["blind"]:
        session.exitstatus = 3  # pacheck's exit code for an instrument-blind run
