"""
experiments/gpu_check.py without a GPU or a training: its help, its deadline's arithmetic, a part
cut by SIGINT, the table packed into pieces and restored, and the next call's instructions.
"""

import json
import os
import shlex
import subprocess
import sys

import gpu_check
from conftest import ROOT

SCRIPT = str(ROOT / "experiments" / "gpu_check.py")


def test_help():
    done = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, timeout=60)
    assert done.returncode == 0 and b"--resume_from" in done.stdout


def test_part_limits_keep_the_grace_and_the_reserve():
    kept = gpu_check.GRACE + gpu_check.RESERVE
    assert gpu_check.part_limit(150, 0, 480) == 150
    assert gpu_check.part_limit(600, 10, 480) == 480 - 10 - kept
    assert gpu_check.part_limit(600, 480 - kept - gpu_check.MIN_PART, 480) == gpu_check.MIN_PART
    assert gpu_check.part_limit(600, 481 - kept - gpu_check.MIN_PART, 480) is None


def test_a_part_cut_at_its_limit_gets_sigint(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "MIN_PART", 0)
    monkeypatch.setattr(gpu_check, "RESERVE", 0)
    args = gpu_check.parse_args([str(tmp_path), "--deadline", "100"])
    check = gpu_check.Check(tmp_path, args)
    said = tmp_path / "said"
    waits = "import signal, sys, time\n"
    waits += f"signal.signal(signal.SIGINT, lambda *_: (open({str(said)!r}, 'w').write('INT'), "
    waits += "sys.exit(130)))\ntime.sleep(30)"
    ended = check.run("waits", [sys.executable, "-c", waits], 1, tmp_path / "waits.log")
    assert ended.cut and ended.code == 130 and ended.seconds < 15 and said.read_text() == "INT"
    assert "- `waits`: cut at its 1 s limit, exit 130" in check.summary.read_text()
    monkeypatch.setattr(gpu_check, "RESERVE", 100)
    assert check.run("late", [sys.executable, "-c", ""], 1, tmp_path / "late.log") is None
    assert "- `late`: not run" in check.summary.read_text()


def write(path, size, record=None):
    """A file of `size` bytes, and its step record (steps.py's) where given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    if record is not None:
        output = path.name.removesuffix(".ckpt")
        steps = path.parent / "logs" / "steps"
        steps.mkdir(parents=True, exist_ok=True)
        (steps / f"{output}.json").write_text(json.dumps(record))


def test_the_table_packed_in_pieces_with_the_params_worth_most_and_restored(tmp_path, monkeypatch):
    work = tmp_path / "OUT" / "table"
    write(work / "vanilla.pretrain.params", 3000, dict(state="done", seconds=100))
    write(work / "vanilla.finetune.params", 3000, dict(state="done", seconds=10))
    write(work / "rope.pretrain.params.ckpt", 3000, dict(state="started", seconds=50))
    write(work / "perceiver.pretrain.params", 3000, dict(state="started", seconds=80))  # cut
    write(work / "vanilla.pretrain.dev.predictions", 100, dict(state="done", correct=3, total=9))
    write(work / "logs" / "vanilla.pretrain.log", 100)
    write(work / "run.sh", 10)
    (work / "src").symlink_to(ROOT / "src")
    monkeypatch.setattr(gpu_check, "PIECE", 1024)
    pieces, carried = gpu_check.pack(work, "table", 7000)  # two large files and the small ones
    assert carried == ["vanilla.pretrain.params", "rope.pretrain.params.ckpt"]
    assert len(pieces) > 1 and all((work.parent / p).stat().st_size <= 1024 for p in pieces)
    carry = tmp_path / "carried"  # as the pieces come back: read-only
    carry.mkdir()
    for piece in pieces:
        (carry / piece).write_bytes((work.parent / piece).read_bytes())
        (carry / piece).chmod(0o444)
    again = tmp_path / "again"
    gpu_check.restore(carry, again)
    checkpoint = "rope.pretrain.params.ckpt"
    assert (again / checkpoint).read_bytes() == (work / checkpoint).read_bytes()
    assert not (again / "vanilla.finetune.params").exists() and not (again / "run.sh").exists()
    assert not (again / "src").exists() and (again / "logs" / "vanilla.pretrain.log").exists()
    row = "| vanilla.pretrain.dev.predictions | done | 0 | 3 of 9 |"
    assert row in gpu_check.records_table(again)
    assert os.access(again / "logs" / "steps" / "vanilla.pretrain.params.json", os.W_OK)


def test_the_next_call_resumes_the_table_with_the_same_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / gpu_check.CARRY).mkdir(parents=True)
    run_flags = "--device cpu --pretrain_stages 'corpus epochs=1'"
    argv = ["OUT", "--parts", "table", "demo", "--run_flags", run_flags, "--variants", "vanilla"]
    args = gpu_check.parse_args(argv)
    lines = gpu_check.carry_lines(args, ["table", "demo"], ["table.tar.0", "table.tar.1"])
    assert "copy table.tar.0 table.tar.1 (from OUT) into logs/gpu_table/" in lines[0]
    command = shlex.split(lines[1])
    assert command[:3] == ["python", "experiments/gpu_check.py", "$OUT"]
    again = gpu_check.parse_args(command[2:])
    assert again.resume_from == gpu_check.CARRY and again.parts == ["table", "demo"]
    assert again.run_flags == run_flags and again.table_flags == "--precision tf32"
    assert again.variants == ["vanilla"]
    assert gpu_check.carry_lines(args, [], []) == ["every part finished"]
    assert "--resume_from" not in " ".join(gpu_check.carry_lines(args, ["demo"], []))
