"""
tools/gpu_check.py without a GPU or a training: its help, its deadline's arithmetic, a part
cut by SIGINT, the table packed into pieces and restored, and the next call's instructions.
"""

import contextlib
import io
import json
import os
import re
import shlex
import signal
import stat
import sys
import tarfile
import types

import pytest

from conftest import run_script


def gpu_check(*argv):
    """gpu_check.py run in this process, what it prints set aside: its exit status (summary.md holds the rest)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return run_script("gpu_check", *argv)


def test_help(capsys):
    assert run_script("gpu_check", "--help") == 0 and "--resume_from" in capsys.readouterr().out


def planned(capsys, *argv):
    """gpu_check.py --plan: (grace + reserve, the least seconds a part is started with, {part: seconds or None})."""
    capsys.readouterr()
    assert run_script("gpu_check", "OUT", "--plan", *argv) == 0
    first, *parts = capsys.readouterr().out.splitlines()
    said = r"deadline \S+ s, less (\d+) s of grace for a cut part and (\d+) s of reserve; a part with under (\d+) s"
    grace, reserve, least = map(int, re.fullmatch(said + " left is not started", first).groups())
    seconds = dict(re.fullmatch(r"- (\w+): (.*)", line).groups() for line in parts)
    return grace + reserve, least, {part: None if s == "not run" else float(s[:-2]) for part, s in seconds.items()}


def test_part_limits_keep_the_grace_and_the_reserve(capsys):
    """--plan: each part its own limit within what the deadline leaves after the parts before it, grace and reserve."""
    limits = ["--limits", "cuda_tests=150", "table=600", "demo=110"]
    kept, least, plan = planned(capsys, "--parts", "cuda_tests", "table", "demo", *limits, "--deadline", 480)
    assert plan == {"cuda_tests": 150, "table": 480 - 150 - kept, "demo": None}  # nothing left for the demo
    two = ["--parts", "cuda_tests", "table", *limits]  # the table just started, then not
    assert planned(capsys, *two, "--deadline", 150 + kept + least)[2] == {"cuda_tests": 150, "table": least}
    assert planned(capsys, *two, "--deadline", 150 + kept + least - 1)[2] == {"cuda_tests": 150, "table": None}


def test_a_part_cut_at_its_limit_gets_sigint(tmp_path):
    """
    The command part cut at its 1 s limit gets SIGINT; the demo, with too little left before the
    deadline, is not run. Without the table among the parts left, the next call resumes nothing.
    """
    out, said = tmp_path / "OUT", tmp_path / "said"
    waits = "import signal, sys, time; "  # a line: the next call's command line holds it
    waits += f"signal.signal(signal.SIGINT, lambda *_: (open({str(said)!r}, 'w').write('INT'), sys.exit(130))); "
    waits += "time.sleep(30)"
    command = shlex.join([sys.executable, "-c", waits])
    # 56 s: the demo's 110 s within what is left once the command has had its second is under 20 s
    argv = ["--parts", "command", "demo", "--deadline", "56", f"--command={command}", "--limits", "command=1"]
    assert gpu_check(out, *argv) == 1
    summary = (out / "summary.md").read_text(encoding="utf-8")
    cut = re.search(r"^- `command`: cut at its 1 s limit, exit 130, (\d+) s$", summary, re.M)
    assert cut and int(cut.group(1)) < 15 and said.read_text() == "INT", summary
    assert re.search(r"^- `demo`: not run, \d+ s left before the deadline$", summary, re.M), summary
    next_call = summary.split("## Next\n\n")[1].splitlines()
    assert next_call[0] == "next call, for the parts left:" and "--resume_from" not in next_call[1]
    assert shlex.split(next_call[1])[3:] == argv


def test_a_part_gets_sigint_where_its_caller_ignores_it(tmp_path):
    """
    Started as a shell's background job (`nohup ... &`), which leaves SIGINT ignored, a part still
    takes SIGINT at its limit: it stops at once, not after the grace before SIGKILL.
    """
    out = tmp_path / "OUT"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert gpu_check(out, "--parts", "command", "--command", "sleep 30", "--limits", "command=1") == 1
    finally:
        signal.signal(signal.SIGINT, previous)
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert re.search(r"^- `command`: cut at its 1 s limit, SIGINT, \d s$", summary, re.M), summary


PARAMS = 8 * 2**20  # two params files of this size fill more than one piece of 15 MiB
PIECE = 15 * 2**20  # the pieces' size: each under the 16 MiB of a file that comes back
RUN_FLAGS = "--device cpu --pretrain_stages 'corpus epochs=1'"
WAITS = "sleep 30"  # the command part's: cut at its limit


def write(path, size, record=None):
    """A read-only file of `size` bytes (as a call brings it back), and its task record (tasks.py's) where given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    path.chmod(0o444)
    if record is not None:
        output = path.name.removesuffix(".ckpt")
        steps = path.parent / "logs" / "tasks"
        steps.mkdir(parents=True, exist_ok=True)
        (steps / f"{output}.json").write_text(json.dumps(record))
        (steps / f"{output}.json").chmod(0o444)


def packed(out):
    """The table packed in OUT's pieces: {member name: (its mode, its bytes)}."""
    pieces = sorted(out.glob("table.tar*"), key=lambda path: int(path.suffix[1:]) if path.suffix[1:].isdigit() else -1)
    with tarfile.open(fileobj=io.BytesIO(b"".join(piece.read_bytes() for piece in pieces))) as tar:
        return {m.name: (m.mode, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()}


@pytest.fixture(scope="module")
def carried_table(tmp_path_factory):
    """
    A table from an earlier call, carried on through two calls from a checkout: the first restores
    it from a read-only copy of its folder, and its table and command end unfinished (run.sh refuses
    --jobs 0, the command is cut at 1 s); the second runs the command line the first's summary gives,
    from the pieces it names copied into logs/gpu_table/.
    """
    base = tmp_path_factory.mktemp("carried")
    earlier = base / "earlier"
    write(earlier / "vanilla.pretrain.params", PARAMS, dict(state="done", seconds=100))
    write(earlier / "vanilla.finetune.params", PARAMS, dict(state="done", seconds=10))
    write(earlier / "rope.pretrain.params.ckpt", PARAMS, dict(state="started", seconds=50))
    write(earlier / "perceiver.pretrain.params", PARAMS, dict(state="started", seconds=80))  # cut
    write(earlier / "vanilla.pretrain.dev.predictions", 100, dict(state="done", correct=3, total=9))
    write(earlier / "logs" / "vanilla.pretrain.log", 100)
    checkout, first, second = base / "checkout", base / "OUT1", base / "OUT2"
    checkout.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(checkout)  # where the next call's logs/gpu_table/ is
        flags = ["--table_flags=--jobs 0", "--run_flags", RUN_FLAGS, "--variants", "vanilla", "--command", WAITS]
        flags += ["--limits", "command=1", "--carry_mib", 20]  # room for the two large files worth most, not a third
        first_code = gpu_check(first, "--parts", "table", "command", "--resume_from", earlier, *flags)
        next_call = (first / "summary.md").read_text(encoding="utf-8").split("## Next\n\n")[1].splitlines()[:2]
        pieces = re.search(r"copy (.*) \(from OUT\) into logs/gpu_table/", next_call[0]).group(1).split()
        (checkout / "logs" / "gpu_table").mkdir(parents=True)
        for piece in pieces:  # as the pieces come back: read-only
            (checkout / "logs" / "gpu_table" / piece).write_bytes((first / piece).read_bytes())
            (checkout / "logs" / "gpu_table" / piece).chmod(0o444)
        command = shlex.split(next_call[1])
        second_code = gpu_check(second, *command[3:])
    summaries = [(out / "summary.md").read_text(encoding="utf-8") for out in (first, second)]
    return types.SimpleNamespace(earlier=earlier, first=first, second=second, codes=(first_code, second_code),
                                 summaries=summaries, next_call=next_call, pieces=pieces, command=command)  # fmt: skip


def test_the_table_packed_in_pieces_with_the_params_worth_most_and_restored(carried_table):
    """
    The table restored from a read-only folder is packed with the params and checkpoints that save
    the most seconds a byte within --carry_mib, in pieces; restored from those (read-only) pieces,
    it is what was packed, writable again, without run.sh and src.
    """
    first, second = carried_table.summaries
    carried = "every log, record and prediction, and vanilla.pretrain.params, rope.pretrain.params.ckpt."
    assert carried in first and carried in second
    assert len(carried_table.pieces) > 1 and all(
        (carried_table.first / piece).stat().st_size <= PIECE for piece in carried_table.pieces
    )
    table = packed(carried_table.first)
    assert "vanilla.finetune.params" not in table and "perceiver.pretrain.params" not in table
    assert "run.sh" not in table and not any(name.split("/")[0] == "src" for name in table)
    assert all(mode & stat.S_IWUSR for mode, _ in table.values())  # restored writable from the read-only folder
    # the second call restored the pieces, and packed the same files again
    row = "| vanilla.pretrain.dev.predictions | done | 0 | 3 of 9 |"
    assert row in second.splitlines()
    again = packed(carried_table.second)
    checkpoint = "rope.pretrain.params.ckpt"
    assert again[checkpoint][1] == (carried_table.earlier / checkpoint).read_bytes() == table[checkpoint][1]
    assert sorted(again) == sorted(table) and "logs/vanilla.pretrain.log" in again
    assert all(mode & stat.S_IWUSR for mode, _ in again.values())


def test_the_next_call_resumes_the_table_with_the_same_flags(carried_table, tmp_path):
    """
    The summary's next call copies the table's pieces into logs/gpu_table/ and runs the same parts
    with the same flags from there; a call whose parts all finished needs no next one.
    """
    first_code, second_code = carried_table.codes
    assert first_code == second_code == 1  # the table and the command unfinished
    pieces = " ".join(carried_table.pieces)
    assert f"copy {pieces} (from OUT) into logs/gpu_table/" in carried_table.next_call[0]
    assert carried_table.command[:3] == ["python", "tools/gpu_check.py", "$OUT"]
    second = carried_table.summaries[1]
    assert "parts: table command; deadline 480 s" in second
    flags = f"--jobs 0 {RUN_FLAGS} --variants vanilla"
    assert f"## `./run.sh {flags}` in OUT/table, resumed from logs/gpu_table" in second
    assert f"## `{WAITS}`\n- `command`: cut at its 1 s limit" in second
    # a command that ends at once, with exit status 0
    assert gpu_check(tmp_path / "OUT", "--parts", "command", "--command", "true") == 0
    assert "## Next\n\nevery part finished\n" in (tmp_path / "OUT" / "summary.md").read_text(encoding="utf-8")
