"""`python -m pacheck ARGS` (and the `pacheck` script of an installed wheel): the pacheck command bundled in the
package (bin/pacheck beside this file), run with ARGS in place of this process, so its output, exit code and
signals are the command's own. Outside a wheel (the source tree with PYTHONPATH=python), the command of the
CMake build the module's library came from, or $PACHECK_BINARY.
"""
import os
import sys


def command_path():
    """The pacheck executable: $PACHECK_BINARY, else the wheel's bin/pacheck, else the build tree's cli/pacheck
    beside the loaded library's cells/ folder. Raises FileNotFoundError saying where it looked."""
    env = os.environ.get("PACHECK_BINARY", "")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"PACHECK_BINARY={env!r}: no such file")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tried = [os.path.join(here, "bin", "pacheck")]
    try:
        from . import _native

        lib = _native.find_library()
        # A CMake build: BUILD/cells/libpacheck_cells*.so and BUILD/cli/pacheck; an install prefix: P/lib and P/bin.
        tried.append(os.path.join(os.path.dirname(os.path.dirname(lib)), "cli", "pacheck"))
        tried.append(os.path.join(os.path.dirname(os.path.dirname(lib)), "bin", "pacheck"))
    except Exception:  # noqa: BLE001 -- no library either: say where the command was looked for
        pass
    for path in tried:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("the pacheck command was not found (looked in " + ", ".join(tried) +
                            "): install the wheel (pip install . in the pacheck checkout) or set PACHECK_BINARY")


def main(argv=None):
    """Replaces this process with `pacheck ARGV` (default sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = command_path()
    except FileNotFoundError as e:
        sys.stderr.write(f"pacheck: {e}\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path] + args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
