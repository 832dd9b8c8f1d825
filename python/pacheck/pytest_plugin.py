"""pytest plugin: each cell of a pacheck suite as one parametrised test, and pacheck's properties as tests.

    import pacheck.pytest_plugin as pp
    from my_kernels import my_kernel              # a pacheck.Kernel

    @pp.cells("gate", my_kernel)
    def test_my_kernel(pacheck_cell):
        pacheck_cell.check()                       # runs the cell; fails with the verdict, skips a decline

    @pp.fuzz(my_kernel)                            # one test per default property (`pacheck fuzz`)
    def test_my_kernel_properties(pacheck_property):
        pacheck_property.check()                   # fails with the shrunk counterexample and its replay line

Loaded by the pytest11 entry point of an installed pacheck, or with `-p pacheck.pytest_plugin`. Test ids
are the cell ids with '@' written '_at_' (pacheck.pytest_id: "test_my_kernel[h32/8 d128 bs16 bf16 ctx4090 nhd
seed7 V:nan_at_tail]"), so `-k 'ctx4090 and V:nan_at_tail'`, `-x`, `--junitxml` and xdist (`-n`) work as usual
(-k matches words with and/or/not and has no '=' or '@': the window cells are `-k 'win and not qlen'`, never
`-k 'win='`); each test's junit <testcase> carries the properties pacheck_cell_id (the exact id) and, once the
cell ran, pacheck_verdict and pacheck_seconds, in xunit1 and xunit2. A failing cell's message gives the
verdict, the worst element with the output and the oracle there, the repro line (`pacheck repro`, or for a
Python kernel without a repro_label the pacheck.run_cell call) and a `rerun:` pytest command that works pasted
in the directory pytest was started in, and the session's summary lists the failing cells' rerun commands; a
declined cell is skipped with the kernel's reason. Long details and tracebacks are cut in the message; the
whole text is in the report directory's errors/ folder, which the message names. A marker whose suite does
not load (or whose test lacks the pacheck_cell argument) is a collection error naming the test, the suite and
the known suites.

The cells of one (suite, kernel, device) run as one batch (pacheck.run_suite): while a test runs its cell's
kernel call, in this process and on pytest's thread, a pool of host threads prepares the cases of the tests
after it (--pacheck-threads). Under xdist each worker runs its cells one at a time (pacheck.run_cell), since
it does not know which tests it will get; --pacheck-serial does the same in one process. Each batch writes a
report directory as `pacheck run --report-dir` does (results.jsonl as cells finish, then report.json,
junit.xml, summary.md, report.html): --pacheck-report-dir DIR (default .pacheck-report in the directory pytest
was started in), one folder per suite and kernel.

Before the first cell, the comparator self-test and pacheck's CPU negative controls run once per suite (once
per xdist worker; not for --collect-only), or their answer is reused from the on-disk cache of this library
build, suite and device (pacheck.check_instrument; --pacheck-recheck runs them again): when pacheck is blind
every cell test fails and the session exits with code 3 (under xdist the workers' cells fail, and pytest's own
exit code 1 is what the controller returns).

Options: --pacheck-suite NAME runs every marked test over NAME instead of its marker's suite (gate in CI,
sweep on a GPU machine, same test file); --pacheck-device DEV overrides the device ("cuda:1"); an empty
value of either is a usage error; --pacheck-timeout S: seconds a Python kernel may take on one cell (default
pacheck.DEFAULT_TIMEOUT, 60; 0 = none), past which the cell is `timeout`; --pacheck-no-instrument leaves the
instrument check out (a quick -k rerun; say so wherever it is used); --pacheck-fuzz-budget S,
--pacheck-fuzz-cases N and --pacheck-fuzz-seed N set every pp.fuzz test's budget (seconds per property),
cases and seed.
"""
import pytest

import pacheck

_MARK = "pacheck"
_FIXTURE = "pacheck_cell"


_FUZZ_MARK = "pacheck_fuzz"
_FUZZ_FIXTURE = "pacheck_property"


def cells(suite, kernel, device=None):
    """Decorator: parametrise the test over the cells of `suite` on `kernel` (a pacheck.Kernel or a
    registered kernel's name); the test takes the `pacheck_cell` argument (a Cell). `device` defaults to the
    kernel's own ("cpu" / "cuda")."""
    return pytest.mark.pacheck(suite=suite, kernel=kernel, device=device)


def fuzz(kernel, properties=None, **options):
    """Decorator: one test per property (default: pacheck fuzz's default properties) of `kernel`; the test takes
    the `pacheck_property` argument (a Property) and calls its check(). `options` are pacheck.fuzz's (cases,
    budget, seed, max_size, device, ...); --pacheck-fuzz-budget/-cases/-seed override them for the session."""
    return pytest.mark.pacheck_fuzz(kernel=kernel, properties=properties, options=options)


class Property:
    """One property of a pp.fuzz test: name, kernel, the pacheck.fuzz options, and result once run."""

    def __init__(self, name, kernel, options):
        self.name, self.kernel, self.options = name, kernel, dict(options)
        self.result = None

    def __repr__(self):
        return f"pacheck_property({self.name!r})"

    def run(self):
        """pacheck.fuzz of this property alone; returns its pacheck.PropertyResult."""
        self.result = pacheck.fuzz(self.kernel, properties=[self.name], **self.options).properties[0]
        return self.result

    def check(self):
        """Runs the property: pytest.fail with the shrunk counterexample and its replay line when it does not
        hold. Returns the pacheck.PropertyResult."""
        r = self.run()
        if not r.passed:
            text = [f"property {r.name} does not hold on {_kernel_label(self.kernel)} after {r.cases} cases"]
            if r.counterexample:
                text += [f"minimal counterexample after {r.shrinks} shrinks:", r.counterexample, "replay " + r.replay]
            else:
                text.append(r.message)
            pytest.fail("\n".join(text), pytrace=False)
        return r


class Cell:
    """One cell of a parametrised test: id, info (pacheck.CellInfo), the suite, kernel and device it runs on."""

    def __init__(self, suite, kernel, device, info, nodeid=None):
        self.suite, self.kernel, self.device, self.info = suite, kernel, device, info
        self.id = info.id
        self.nodeid = nodeid
        self.rerun = None  # the shell command that reruns this test (set when the test is set up)
        self.result = None
        self.group = None  # the batch it runs in (None: alone, pacheck.run_cell)
        self.report_dir = None  # where the whole text of a cut message goes

    def __repr__(self):
        return f"pacheck_cell({self.id!r})"

    def run(self):
        """Runs the cell (in its batch, or pacheck.run_cell) and returns its pacheck.CellResult; no assertion. A
        cell pacheck refuses to run (its memory does not fit the budget) raises pacheck.PacheckError."""
        if self.group is not None:
            self.result = self.group.result(self)
        else:
            self.result = pacheck.run_cell(self.suite, self.kernel, self.id, self.device)
            if self.report_dir:
                self.result.write_full_text(self.report_dir, pacheck.pytest_id(self.id).replace("/", "_").replace(" ", "_"))
        return self.result

    def check(self):
        """Runs the cell: pytest.skip when the kernel declines it, pytest.fail with the verdict, the worst
        element and the repro line when it fails (a negative control's caught cell passes). Returns the
        pacheck.CellResult."""
        try:
            r = self.run()
        except pacheck.PacheckError as e:
            pytest.fail(f"cell '{self.id}': pacheck refused to run it: {e}", pytrace=False)
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
    g.addoption("--pacheck-recheck", action="store_true",
                help="run the instrument check again instead of reusing its cached answer")
    g.addoption("--pacheck-timeout", default=None, type=float,
                help="seconds a Python kernel may take on one cell (default 60; 0 = no limit): past it, `timeout`")
    g.addoption("--pacheck-threads", default=None, type=int,
                help="host threads preparing the next cells' cases while a cell runs (default: every core)")
    g.addoption("--pacheck-serial", action="store_true",
                help="run each cell alone (pacheck.run_cell), preparing nothing ahead (as under xdist)")
    g.addoption("--pacheck-report-dir", default=None,
                help="report directories of the batches, one per suite and kernel (default .pacheck-report)")
    g.addoption("--pacheck-fuzz-budget", default=None, type=float, help="pp.fuzz tests: seconds per property")
    g.addoption("--pacheck-fuzz-cases", default=None, type=int, help="pp.fuzz tests: cases per property")
    g.addoption("--pacheck-fuzz-seed", default=None, type=int, help="pp.fuzz tests: the RapidCheck seed")


def pytest_configure(config):
    config.addinivalue_line("markers", "pacheck(suite, kernel, device=None): parametrise over a suite's cells")
    config.addinivalue_line("markers", "pacheck_fuzz(kernel, properties=None, options={}): one test per property")
    # An empty value would be ignored (the marker's suite or device would run instead): refuse it.
    for opt, what in (("--pacheck-suite", "a suite name or .toml path"), ("--pacheck-device", "cpu, cuda or cuda:N"),
                      ("--pacheck-report-dir", "a folder")):
        value = config.getoption(opt)
        if value is not None and not str(value).strip():
            raise pytest.UsageError(f"{opt}: empty value {value!r} (give {what}, or leave the option out to use each "
                                    "test's marker)")
    for opt in ("--pacheck-timeout", "--pacheck-threads", "--pacheck-fuzz-budget", "--pacheck-fuzz-cases"):
        value = config.getoption(opt)
        if value is not None and value < 0:
            raise pytest.UsageError(f"{opt}: {value!r} is negative")
    if config.getoption("--pacheck-timeout") is not None:
        pacheck.DEFAULT_TIMEOUT = config.getoption("--pacheck-timeout")
    # ran: (suite, kernel label) -> [cells run, cells declined] over this process's cells, for the "no cell
    # ran" rule of `pacheck run` (a kernel that declined every selected cell tested nothing: a failure).
    config._pacheck = {"checks": {}, "blind": [], "failed_repro": [], "groups": {}, "ran": {}}


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
    _generate_fuzz_tests(metafunc)
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
    metafunc.parametrize(_FIXTURE, [Cell(suite, kernel, device, i) for i in infos],
                         ids=[pacheck.pytest_id(i.id) for i in infos])


def _generate_fuzz_tests(metafunc):
    m = metafunc.definition.get_closest_marker(_FUZZ_MARK)
    if m is None:
        return
    name = _test_name(metafunc.definition)
    if _FUZZ_FIXTURE not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(f"{name}: a pp.fuzz test takes the '{_FUZZ_FIXTURE}' argument")
    kernel = m.kwargs["kernel"]
    options = dict(m.kwargs.get("options") or {})
    config = metafunc.config
    for opt, key in (("--pacheck-fuzz-budget", "budget"), ("--pacheck-fuzz-cases", "cases"),
                     ("--pacheck-fuzz-seed", "seed")):
        if config.getoption(opt) is not None:
            options[key] = config.getoption(opt)
    if "budget" in options and "cases" in options and config.getoption("--pacheck-fuzz-budget") is not None:
        options.pop("cases")  # the session's budget wins over the marker's cases
    names = m.kwargs.get("properties") or _default_properties()
    if "budget" in options:
        options["budget"] = float(options["budget"])  # per property here: each test runs one property
    metafunc.parametrize(_FUZZ_FIXTURE, [Property(n, kernel, options) for n in names], ids=list(names))


def _default_properties():
    """pacheck fuzz's default properties (every one but the opt-in ones), from the library's table."""
    return pacheck.properties()


def _instrument(config, suite, device="cpu"):
    """The instrument check of `suite`, made once per process (session or xdist worker), or its cached answer."""
    checks = config._pacheck["checks"]
    if suite not in checks:
        try:
            checks[suite] = pacheck.check_instrument(suite, device, recheck=config.getoption("--pacheck-recheck"))
        except pacheck.PacheckError as e:
            checks[suite] = pacheck.InstrumentCheck(True, f"the instrument check could not run: {e}\n")
        if checks[suite].blind:
            config._pacheck["blind"].append(suite)
    return checks[suite]


class _Group:
    """The cells of one (suite, kernel, device) in the order of the session's tests, run as one batch
    (pacheck.run_suite's SuiteRun) opened at the group's first test."""

    def __init__(self, suite, kernel, device, report_dir):
        self.suite, self.kernel, self.device, self.report_dir = suite, kernel, device, report_dir
        self.ids = []
        self.run = None
        self.error = None

    def result(self, cell):
        if self.error is None and self.run is None:
            try:
                self.run = pacheck.SuiteRun(self.suite, self.kernel, ids=self.ids, device=self.device,
                                            threads=self.threads, report_dir=self.report_dir)
            except pacheck.PacheckError as e:
                self.error = str(e)
        if self.error is not None:
            raise pacheck.PacheckError(f"the batch of suite {self.suite!r} could not start: {self.error}")
        return self.run.result(cell.id)

    def close(self):
        if self.run is not None:
            try:
                return self.run.close()
            except pacheck.PacheckError as e:
                return {"reports": f"reports of {self.report_dir} not written: {e}"}
        return None


def _report_root(config):
    import os

    root = config.getoption("--pacheck-report-dir") or os.path.join(str(config.invocation_params.dir), ".pacheck-report")
    worker = getattr(config, "workerinput", {}).get("workerid")
    return os.path.join(root, worker) if worker else root


def _group_folder(suite, kernel):
    import re

    name = kernel.name if isinstance(kernel, pacheck.Kernel) else str(kernel)
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{str(suite).rsplit('/', 1)[-1]}-{name}")


def _make_groups(session):
    """Each (suite, kernel, device)'s cells in the order of session.items (after -k and deselection), so each
    batch prepares exactly the cells the session will run. None under xdist or --pacheck-serial: each cell runs
    alone (a worker does not know which tests it will get)."""
    import os

    config = session.config
    serial = config.getoption("--pacheck-serial") or hasattr(config, "workerinput")
    root = _report_root(config)
    groups = config._pacheck["groups"]
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get(_FIXTURE) if callspec else None
        if not isinstance(cell, Cell):
            continue
        cell.report_dir = os.path.join(root, _group_folder(cell.suite, cell.kernel))
        if serial:
            continue
        key = (str(cell.suite), id(cell.kernel) if isinstance(cell.kernel, pacheck.Kernel) else str(cell.kernel),
               cell.device)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(cell.suite, cell.kernel, cell.device, cell.report_dir)
            g.threads = config.getoption("--pacheck-threads")
        if cell.id not in g.ids:
            g.ids.append(cell.id)
        cell.group = g


def pytest_collection_finish(session):
    """Groups the cells into batches, then runs the instrument check of every suite the collected tests use,
    before the first test."""
    config = session.config
    if config.option.collectonly:
        return
    _make_groups(session)
    if config.getoption("--pacheck-no-instrument"):
        return
    suites = {}
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get(_FIXTURE) if callspec else None
        if isinstance(cell, Cell) and cell.suite not in suites:
            suites[cell.suite] = cell.device
    for s, device in suites.items():
        _instrument(config, s, device)


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
        item.user_properties.append(("pacheck_seconds", f"{cell.result.seconds:.6f}"))
        counts = item.config._pacheck["ran"].setdefault((cell.suite, _kernel_label(cell.kernel)), [0, 0])
        counts[1 if cell.result.declined else 0] += 1
    outcome = yield
    rep = outcome.get_result()
    if ran and rep.failed:
        # The pytest command that reruns the test (pasteable where pytest was started), and the pacheck repro
        # line too when it names a loadable kernel (a built-in, a plugin, a Kernel with a repro_label).
        lines = [cell.rerun or cell.result.repro]
        if cell.rerun and cell.result.repro.startswith(pacheck._native.COMMAND + " repro "):
            lines.append(cell.result.repro)
        item.config._pacheck["failed_repro"].append(lines)


def _nothing_ran(st):
    """(suite, kernel label, declined cells) of each kernel whose every cell in this process was declined."""
    return [(suite, kernel, declined) for (suite, kernel), (ran, declined) in st["ran"].items() if ran == 0]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    st = getattr(config, "_pacheck", None)
    for suite, kernel, declined in _nothing_ran(st) if st and not hasattr(config, "workerinput") else []:
        terminalreporter.write_line(f"pacheck: NO CELL RAN: {kernel} declined all {declined} selected cells of suite "
                                    f"'{suite}': it tested nothing, which counts as a failure, as `pacheck run` "
                                    "counts it (the wrong suite for this kernel, or a filter that keeps none of "
                                    "its cells?)", red=True)
    closed = [(g, g.close()) for g in st["groups"].values()] if st else []
    if not st or not (st["checks"] or st["failed_repro"] or any(c for _, c in closed)):
        return
    tr = terminalreporter
    tr.section("pacheck")
    for g, c in closed:
        if c:
            tr.write_line(f"batch {g.suite} on {_kernel_label(g.kernel)}: {c.get('verdicts', '')}; "
                          f"{c.get('reports', '')}".rstrip("; "))
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
    elif st and _nothing_ran(st) and session.exitstatus == 0 and not hasattr(session.config, "workerinput"):
        session.exitstatus = 1  # an xdist worker sees part of the cells only: the rule is for a whole session
