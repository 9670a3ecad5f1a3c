"""compiler.core.child: a child's output costs a bounded tail, and a child that hangs ends at its deadline with what
it started."""

from __future__ import annotations

import os
import sys
import time

from compiler.core.child import Child, last_line, run


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_runs_to_its_end_with_its_status_streams_and_input():
    done = run(_python("import sys; print(sys.stdin.read().upper()); sys.exit(3)"), 30, input_text="hello")
    assert (done.returncode, done.stdout.strip(), done.timed_out) == (3, "HELLO", False)


def test_only_the_end_of_a_flood_of_output_is_kept():
    done = run(_python("import sys; sys.stdout.write('x' * (8 << 20) + 'END')"), 60, keep=1024)
    assert len(done.stdout) == 1024 and done.stdout.endswith("END")


def test_merged_streams_keep_their_order():
    code = "import sys; print('one', flush=True); print('two', file=sys.stderr, flush=True); print('three')"
    assert run(_python(code), 30, merge=True).stdout.split() == ["one", "two", "three"]


def test_a_child_that_hangs_is_killed_at_its_deadline_with_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    done = Child(_python(code), 3).finish()
    assert done.timed_out and done.returncode < 0
    assert time.monotonic() - started < 15
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the kernel reaps it (its parent, init, waits) a moment after the kill
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the grandchild outlived its group")


def test_the_last_line_is_the_last_non_empty_one_made_printable():
    assert last_line("warning\nerror: \x1b[1mbad\n\n  \n") == "error: \\x1b[1mbad"
    assert last_line("") == ""
