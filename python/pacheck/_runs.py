"""Whole suites and properties from Python: pacheck.run_suite (a batch of cells whose cases are prepared ahead on
a pool of host threads while the kernel runs, on this thread, in order) and pacheck.fuzz (`pacheck fuzz`'s
properties, shrinking and reproduce strings on a Kernel). Imported by pacheck/__init__.py; use them from there.
"""
import dataclasses
import os
import re
import shlex

from . import _native


def _lib():
    return _native.library()


class SuiteRun:
    """The cells of a suite on one kernel, run in order (pacheck.run_suite makes one).

    Iterating gives each cell's CellResult as the kernel runs it, on this thread; result(cell_id) runs the cells
    up to that one and returns its result (the pytest plugin asks one test's cell at a time). close() (or the
    end of a `with` block, or of the iteration) stops the threads, writes the report directory's files when
    every cell ran, and returns the summary. The batch's threads prepare cases only (pre-paging tensors, the
    oracle, the paged cache): the kernel is never called from them.
    """

    def __init__(self, suite, kernel, ids=None, filter=None, device=None, threads=None, ahead=None, report_dir=None,
                 max_memory=None):
        from . import Kernel, _kernel_name

        self.suite, self.kernel = suite, kernel
        name = _kernel_name(kernel)
        if device is None:
            device = kernel.device if isinstance(kernel, Kernel) else "cpu"
        request = {"suite": str(suite), "kernel": name, "device": device}
        if ids is not None:
            if isinstance(ids, str):
                raise TypeError(f"ids: a list of cell ids, not the str {ids!r}")
            request["ids"] = [str(i) for i in ids]
        if filter:
            request["filter"] = str(filter)
        for key, value in (("threads", threads), ("ahead", ahead)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise TypeError(f"{key}: an int >= 0, not {value!r}")
                request[key] = value
        self.report_dir = os.fspath(report_dir) if report_dir else None
        if self.report_dir:
            request["report_dir"] = self.report_dir
        if max_memory:
            request["max_memory"] = float(max_memory)
        info = _lib().call_json("pacheck_cells_batch_open", request)
        self.handle = info["batch"]
        self.cells, self.cases, self.threads, self.ahead = info["cells"], info["cases"], info["threads"], info["ahead"]
        self.budget, self.budget_source = info["budget"], info["budget_source"]
        self.results = []  # in order, as they ran
        self._by_id = {}
        self._done = False
        self.summary = None
        if isinstance(kernel, Kernel) and self.report_dir:
            kernel.report_dir = self.report_dir

    def __repr__(self):
        return f"pacheck.SuiteRun({self.suite!r}, {self.kernel!r}, {len(self.results)}/{self.cells} cells)"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def next(self):
        """Runs the next cell and returns its CellResult; None after the last."""
        from . import Kernel, _cell_result

        if self._done:
            return None
        if isinstance(self.kernel, Kernel):
            self.kernel.last_error = None
        ans = _lib().call("pacheck_cells_batch_next", self.handle)
        if ans["done"]:
            self._done = True
            return None
        r = _cell_result(ans["cell"], self.kernel, self.suite)
        if self.report_dir:
            r.write_full_text(self.report_dir, f"{len(self.results):05d}")
        self.results.append(r)
        self._by_id[r.cell_id] = r
        return r

    def __iter__(self):
        for r in self.results:
            yield r
        while True:
            r = self.next()
            if r is None:
                break
            yield r
        self.close()

    def result(self, cell_id):
        """The CellResult of `cell_id`, running the cells before it that have not run. KeyError when the batch has
        no such cell."""
        while cell_id not in self._by_id:
            if self.next() is None:
                raise KeyError(f"cell {cell_id!r} is not in this batch of suite {self.suite!r}")
        return self._by_id[cell_id]

    def close(self):
        """Ends the batch; returns the summary {"passed", "failed", "declined", "caught", "results", "planned",
        "stopped", "verdicts", "exit_code", "reports"} (also kept as .summary). Calling it again returns the same."""
        if self.summary is None:
            self.summary = _lib().call("pacheck_cells_batch_close", self.handle)
        return self.summary


def run_suite(suite, kernel, ids=None, filter=None, device=None, threads=None, ahead=None, report_dir=None,
              max_memory=None, check_instrument=True):
    """Runs cells of `suite` (a name or .toml path) on `kernel` (a Kernel or a registered kernel's name) and
    returns the SuiteRun, which runs them as it is iterated (or all at once: list(run), run.close()).

    ids: the cells to run, in that order (default: every cell, in suite order, as pacheck.cells lists them);
    filter: a regular expression the ids must match (std::regex_search, as `pacheck run --filter`); device: as
    run_cell; threads: host threads preparing cases (default: every core); ahead: cases prepared past the
    current one (default: threads, cut to what the memory budget holds); report_dir: results.jsonl, run.json
    and the report files of `pacheck run --report-dir` (report.json, junit.xml, ...), and errors/ with the
    whole text of each message CellResult.message() cuts; max_memory: as run_cell. Each cell's verdict is the
    one run_cell gives it (the same admission, execute_cell and judge): a cell that does not fit the memory
    budget is an `error` saying so, before anything is generated. check_instrument: first the comparator
    self-test and the CPU negative controls (cached, pacheck.check_instrument); PacheckError when blind.
    Raises PacheckError for an unknown suite, kernel or device, an id not in the suite, a filter that matches
    nothing."""
    if check_instrument:
        from . import PacheckError
        from . import check_instrument as check

        c = check(suite, device or "cpu")
        if c.blind:
            raise PacheckError(f"pacheck is blind on suite {suite!r} (instrument check failed):\n{c.summary}")
    return SuiteRun(suite, kernel, ids, filter, device, threads, ahead, report_dir, max_memory)


@dataclasses.dataclass
class PropertyResult:
    """One property's run, as `pacheck fuzz` prints it: passed, cases (that held), seconds, coverage (the tags'
    shares), over_memory (cases discarded for the memory budget), device_out_of_memory (cases discarded because
    the device ran out of memory); when it failed, counterexample (the shrunk
    case's text: its cell id, what does not hold, the repro line), cell_id, shrinks, reproduce (the string that
    replays it) and replay (the call, or for a kernel pacheck can load the `pacheck fuzz` line, that does);
    exercised: of the cases, those that checked something (a property that passed with none is "not
    exercised", not "held"; None from a library that does not count them)."""

    name: str
    passed: bool
    cases: int
    seconds: float
    coverage: str
    over_memory: int = 0
    message: str = ""
    counterexample: str = ""
    cell_id: str = ""
    shrinks: int = 0
    reproduce: str = ""
    replay: str = ""
    exercised: int = None
    device_out_of_memory: int = 0

    @property
    def exercised_none(self):
        """True when the property passed without checking anything in any case (`not exercised`)."""
        return self.passed and self.exercised == 0

    def line(self):
        """The property's row of the report: name, held/not exercised/FAILED, cases, seconds, coverage (led by
        "N of M cases exercised" when some case checked nothing)."""
        result = "FAILED" if not self.passed else "not exercised" if self.exercised_none else "held"
        coverage = self.coverage
        if self.exercised is not None and self.exercised < self.cases:
            coverage = f"{self.exercised} of {self.cases} cases exercised" + (", " + coverage if coverage else "")
        return f"{self.name:<18} {result:<13} {self.cases:>6} {self.seconds:>8.1f}  {coverage}"


@dataclasses.dataclass
class FuzzResult:
    """pacheck.fuzz's answer: the kernel, device and seed, and one PropertyResult per property in order."""

    kernel: str
    device: str
    seed: int
    properties: list
    negative_control: bool = False

    @property
    def passed(self):
        return all(p.passed for p in self.properties)

    def failed(self):
        return [p for p in self.properties if not p.passed]

    def report(self):
        """The text `pacheck fuzz` prints: one row per property, then each counterexample and its replay line."""
        lines = [f"pacheck.fuzz: {self.kernel} on {self.device}, seed {self.seed}", "",
                 f"{'property':<18} {'result':<13} {'cases':>6} {'seconds':>8}  coverage"]
        for p in self.properties:
            lines.append(p.line())
            if not p.passed:
                if p.counterexample:
                    lines.append(f"  minimal counterexample after {p.shrinks} shrinks:")
                    lines += ["    " + t for t in p.counterexample.splitlines()]
                    lines.append("    replay " + p.replay)
                else:
                    lines.append("  " + p.message)
        unexercised = sum(p.exercised_none for p in self.properties)
        held = sum(p.passed for p in self.properties) - unexercised
        lines += ["", f"{held} properties held, {unexercised} not exercised, {len(self.failed())} failed"]
        return "\n".join(lines)


def _replay(kernel, device, prop, reproduce):
    from . import Kernel

    if isinstance(kernel, Kernel) and not kernel._label_given:
        return (f"pacheck.fuzz(KERNEL, properties=[{prop!r}], reproduce={reproduce!r})  # KERNEL: the pacheck.Kernel "
                f"{kernel.name!r}")
    name = kernel.name if isinstance(kernel, Kernel) else str(kernel)
    plugin = f" --plugin {shlex.quote(kernel.repro_label)}" if isinstance(kernel, Kernel) else ""
    dev = "" if device == "cpu" else f" --device {device}"
    return (f"{_native.COMMAND} fuzz --kernel {name}{dev}{plugin} --property {prop} "
            f"--reproduce {shlex.quote(reproduce)}")


def properties(opt_in=False):
    """The names of pacheck fuzz's properties in their table's order: the default ones, and the opt-in ones too
    with opt_in=True (PacheckError from a library without the properties)."""
    return [p["name"] for p in _lib().call_json("pacheck_cells_fuzz", {"list": True})["properties"]
            if opt_in or not p["opt_in"]]


def fuzz(kernel, properties=None, seed=None, cases=None, budget=None, max_size=100, shrink=True, reproduce=None,
         device=None, max_memory=None):
    """`pacheck fuzz` on `kernel` (a Kernel or a registered kernel's name), in this process and on this thread:
    the same properties (default: every one but the opt-in ones, for an MLA kernel those that apply to it;
    `properties` names some, as `pacheck list properties` prints them), random cells (MLA cells for an MLA
    kernel, Kernel(mla=True)), shrinking to a minimal counterexample and reproduce strings.

    cases: per property (default 100); budget: wall seconds in all, shared by the properties (instead of
    cases); seed: RapidCheck's (default random, in the answer); max_size: 0..100; reproduce: a string an earlier
    failure printed, replayed (one property); max_memory: bytes one generated case may take (default 50% of
    RAM), a larger case is discarded and counted. Returns FuzzResult (its .report() is `pacheck fuzz`'s text,
    each failure's replay line included). Raises PacheckError for an unknown kernel or property, a property
    that does not apply to an MLA kernel (gqa-expansion, exact-scaling, scale-folding, neutral-variants,
    overflow), a device it cannot use, a kernel that declines every probe case of its kind, or a library without
    the properties (libpacheck_cells.so: use the wheel's libpacheck_cells_c.so)."""
    from . import Kernel, _kernel_name

    name = _kernel_name(kernel)
    if properties is not None and isinstance(properties, str):
        raise TypeError(f"properties: a list of property names, not the str {properties!r} (write [{properties!r}])")
    request = {"kernel": name, "max_size": int(max_size), "shrink": bool(shrink)}
    if device is not None:
        request["device"] = device
    elif isinstance(kernel, Kernel) and kernel.device != "cpu":
        request["device"] = kernel.device
    if properties:
        request["properties"] = [str(p) for p in properties]
    if seed is not None:
        request["seed"] = int(seed)
    if cases:
        request["cases"] = int(cases)
    if budget:
        request["budget"] = float(budget)
    if reproduce:
        request["reproduce"] = str(reproduce)
    if max_memory:
        request["max_memory"] = float(max_memory)
    ans = _lib().call_json("pacheck_cells_fuzz", request)
    props = []
    for p in ans["properties"]:
        text = p["counterexample"]
        if isinstance(kernel, Kernel) and not kernel._label_given and p["cell_id"]:
            # `pacheck repro` cannot load a Python kernel: the counterexample's repro is the run_cell call.
            text = re.sub(r"(?m)^(\s*repro\s+)" + re.escape(_native.COMMAND) + r" repro .*<python kernel .*$",
                          lambda m: f"{m.group(1)}pacheck.run_cell(None, KERNEL, {p['cell_id']!r})", text)
        r = PropertyResult(p["name"], p["passed"], p["cases"], p["seconds"], p["coverage"], p["over_memory"],
                           p["message"], text, p["cell_id"], p["shrinks"], p["reproduce"],
                           exercised=p.get("exercised"), device_out_of_memory=p.get("device_out_of_memory", 0))
        if not r.passed and r.reproduce:
            r.replay = _replay(kernel, ans["device"], r.name, r.reproduce)
        props.append(r)
    return FuzzResult(ans["kernel"], ans["device"], ans["seed"], props, ans["negative_control"])
