"""
The checks that need a CUDA GPU, for one command on a GPU machine that returns what it writes under
OUT, from the repository root with the assignment's four files in data/ (copied there and carried):

    python tools/gpu_check.py OUT [--parts table cuda_tests ...] [--deadline 480]
        [--table_flags "--precision tf32"] [--run_flags FLAGS] [--variants V ...]
        [--handout_flags FLAGS] [--resume_from DIR] [--command CMD] [--limits PART=SECONDS ...]
        [--plan]

The parts run one after another in the order given, each within its own limit (LIMITS, or
--limits) and what is left before the deadline; a part cut at its limit gets SIGINT (the table's
trainings stop after a step and write their checkpoints), and a part with too little time left is
not started. --plan prints the seconds each part would get, every part before it taking its whole
limit, and runs none. OUT/summary.md grows as each part ends; its figures come from the parts'
JSON records, not from printed text.

  table       ./run.sh TABLE_FLAGS RUN_FLAGS [--variants ...] with OUT/table as its folder
  cuda_tests  tests/training/test_cuda.py and tests/training/test_capture.py
  demo        ./run.sh demo with OUT/demo as DEMO_DIR and RUN_FLAGS as DEMO_FLAGS
  suite       the whole test suite with CUDA visible
  paces       experiments/step_pace.py: vanilla's handout pretraining under each way of running
              its step
  handout     vanilla's handout pretraining, finetuning, dev score and frames readout, each a
              run.py command with HANDOUT_FLAGS RUN_FLAGS, in OUT/handout
  command     --command's command line, from the repository root: a check of one's own

A call brings back at most 8 files of OUT, each under 16 MiB and 64 MiB in all, so a part ends by
leaving one file or a few: its log, or its folder packed into <part>.tar (the table's in pieces,
with the params and checkpoints that save the next call the most seconds, within --carry_mib). A
table cut at the deadline goes on in the next call from those pieces: summary.md ends with what to
copy, carry and run. Rehearse it on a CPU with smoke flags in --run_flags.
"""

import argparse
import dataclasses
import datetime
import importlib.util
import io
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the project's modules, as run.py reads them

from factgpt.common.files import resolve_data_path  # noqa: E402
from factgpt.common.questions import read_question_file  # noqa: E402

RUN_PY = str(ROOT / "src" / "run.py")
# A call's command may run 600 s; the machine's start and the copies back come on top of it.
DEADLINE = 480
GRACE = 20  # seconds a cut part has to write its checkpoints and end, before SIGKILL
RESERVE = 15  # seconds kept after the parts for packing and the summary
MIN_PART = 20  # a part that would get fewer seconds is not started
# Each part's seconds at most, set from its earlier runs (docs/speed.md); the whole table needs
# more than one call, and goes on in the next from what the last one kept.
LIMITS = dict(table=600, cuda_tests=150, demo=110, suite=300, paces=240, command=60)
HANDOUT_LIMITS = dict(pretraining=240, finetuning=90, dev=60, frames=150)
FILES_BACK, FILE_BACK_MIB, ALL_BACK_MIB = 8, 16, 64  # what a call brings back of OUT
PIECE = 15 * 2**20  # the table's pieces, each under a returned file's 16 MiB
CARRY_MIB = 45  # three pieces, which leave room for the repository in the 64 MiB carried
CARRY = "logs/gpu_table"  # where the next call's table is carried from (git ignores logs/)
TRAIN, DEV = "birth_places_train.tsv", "birth_dev.tsv"


@dataclasses.dataclass
class Ended:
    """How a part's command ended: its exit code, its seconds, whether it was cut at its limit."""

    code: int
    seconds: float
    cut: bool
    limit: float

    @property
    def finished(self):
        return not self.cut and self.code == 0

    def __str__(self):
        cut = f"cut at its {self.limit:.0f} s limit, " if self.cut else ""
        how = f"exit {self.code}" if self.code >= 0 else f"{signal.Signals(-self.code).name}"
        return f"{cut}{how}, {self.seconds:.0f} s"


def part_limit(own, elapsed, deadline):
    """A part's seconds: its own limit, within what the deadline leaves once a cut part's grace
    and the summary's reserve are kept; None where that is under MIN_PART (or under its own
    limit, where that is shorter)."""
    limit = min(own, deadline - elapsed - GRACE - RESERVE)
    return limit if limit >= min(own, MIN_PART) else None


def own_limit(args, part):
    """A part's own seconds: --limits', else LIMITS'."""
    return args.limits.get(part, LIMITS.get(part))


def plan_lines(args):
    """The seconds each part would get, every part before it taking its whole limit (--plan)."""
    kept = f"less {GRACE} s of grace for a cut part and {RESERVE} s of reserve"
    lines, elapsed = [f"deadline {args.deadline:g} s, {kept}; a part with under {MIN_PART} s left is not started"], 0
    for part in args.parts:
        own = own_limit(args, part)
        if own is None:  # the handout part: a limit for each of its commands
            own = sum(HANDOUT_LIMITS.values())
        limit = part_limit(own, elapsed, args.deadline)
        lines.append(f"- {part}: " + ("not run" if limit is None else f"{limit:g} s"))
        elapsed += limit or 0
    return lines


class Check:
    """One call: its arguments, its deadline's clock, and the summary the parts append to."""

    def __init__(self, out, args):
        self.out, self.args = out, args
        self.start = time.monotonic()
        self.summary = out / "summary.md"
        self.stopping = False  # this script was interrupted: no more parts
        self.finished = {}  # a part's name: whether it ran to its end with exit 0
        self.table_pieces = []
        self.env = {**os.environ, "PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}

    def note(self, *lines):
        """Append lines to summary.md at once, so that a call cut short still brings them back."""
        with open(self.summary, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

    def run(self, name, command, own_limit, log, cwd=ROOT, env=None):
        """Run a command into its log, SIGINT to its process group at its limit; how it ended, or
        None where the deadline left too little to start it."""
        elapsed = time.monotonic() - self.start
        limit = part_limit(own_limit, elapsed, self.args.deadline)
        if limit is None or self.stopping:
            left = max(0, self.args.deadline - elapsed)
            self.note(f"- `{name}`: not run, {left:.0f} s left before the deadline")
            return None
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with open(log, "ab") as f:
            # a session of its own: the signal reaches all the part's processes and none of ours
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=env or self.env,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=default_sigint,
            )
            try:
                code, cut = process.wait(timeout=limit), False
            except (subprocess.TimeoutExpired, KeyboardInterrupt) as e:
                self.stopping = self.stopping or isinstance(e, KeyboardInterrupt)
                code, cut = stop(process), True
        ended = Ended(code, time.monotonic() - start, cut, limit)
        self.note(f"- `{name}`: {ended}")
        return ended


def default_sigint():
    """
    In a part's process before it starts: SIGINT's default action, which a shell's background job
    (`nohup ... &`) leaves ignored, so that a cut part stops at once instead of after GRACE.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(process):
    """SIGINT to the process's group, SIGKILL after GRACE seconds; its exit code."""
    signal_group(process, signal.SIGINT)
    try:
        return process.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
        return process.wait()


def signal_group(process, signum):
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):  # the group has ended
        pass


def code_block(lines):
    return ["```", *lines, "```"]


def tail(path, count):
    """A log's last lines, each refresh of a progress bar on a line of its own."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ["(no log)"]
    return [line for line in text.replace("\r", "\n").splitlines() if line.strip()][-count:]


def records_table(folder):
    """A line per task record in folder/logs/tasks/ (tasks.py): output, state, seconds, score."""
    lines = ["| output | state | seconds | correct |", "| --- | --- | --- | --- |"]
    for path in sorted((folder / "logs" / "tasks").glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        score = f"{record['correct']} of {record['total']}" if record.get("total") else ""
        seconds = record.get("seconds", 0)
        lines.append(f"| {path.stem} | {record.get('state')} | {seconds:.0f} | {score} |")
    return lines if len(lines) > 2 else ["(no task records)"]


def seconds_a_byte(path):
    """What carrying a params file or a checkpoint saves the next call, in its task's recorded
    seconds a byte; 0 where the record does not vouch for it (as tasks.py's kept and resume)."""
    checkpoint = path.name.endswith(".ckpt")
    record_path = path.parent / "logs" / "tasks" / (path.name.removesuffix(".ckpt") + ".json")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    if record.get("state") != ("started" if checkpoint else "done"):
        return 0
    return record.get("seconds", 0) / max(1, path.stat().st_size)


def pack(folder, name, budget):
    """
    Pack a folder into <name>.tar beside it, in pieces <name>.tar.0, .1, ... where it is over
    PIECE bytes: every file but params and checkpoints, and of those the ones that save the most
    seconds a byte, while the whole stays within budget bytes. The pieces' and params' names.
    """
    small, large = [], []
    for parent, _, names in os.walk(folder):  # symbolic links to folders are not entered
        for path in (Path(parent) / n for n in names):
            if not path.is_symlink() and path != folder / "run.sh":
                (large if path.suffix in (".params", ".ckpt") else small).append(path)
    room, chosen = budget - sum(path.stat().st_size for path in small), []
    for path in sorted(large, key=seconds_a_byte, reverse=True):
        if seconds_a_byte(path) > 0 and path.stat().st_size <= room:
            chosen.append(path)
            room -= path.stat().st_size
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(small) + chosen:
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    data = buffer.getvalue()
    pieces = [data[i : i + PIECE] for i in range(0, len(data), PIECE)]
    names = [f"{name}.tar"] if len(pieces) == 1 else [f"{name}.tar.{i}" for i in range(len(pieces))]
    for piece_name, piece in zip(names, pieces):
        (folder.parent / piece_name).write_bytes(piece)
    return names, [str(path.relative_to(folder)) for path in chosen]


def piece_order(path):
    """table.tar, then table.tar.0, table.tar.1, ... in the order of their numbers."""
    suffix = path.name.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def restore(source, work):
    """Put a previous call's table into the work folder: its pieces (or one .tar), else a copy of
    its folder; then make that writable, since what a call brings back is read-only."""
    pieces = [source] if source.is_file() else sorted(source.glob("table.tar*"), key=piece_order)
    if pieces:
        data = b"".join(piece.read_bytes() for piece in pieces)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(work, filter="data")
            else:
                tar.extractall(work)  # our own archive
    else:
        ignore = shutil.ignore_patterns("src", "run.sh")
        shutil.copytree(source, work, symlinks=True, dirs_exist_ok=True, ignore=ignore)
    for parent, _, names in os.walk(work):
        for path in [Path(parent), *(Path(parent) / n for n in names)]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)


def next_command(args, parts):
    """The next call's command for these parts, with this call's flags (a task's record keys on
    them, so that the table's tasks done are kept)."""
    argv = ["--parts", *parts]
    if args.deadline != DEADLINE:
        argv += ["--deadline", f"{args.deadline:g}"]
    if "table" in parts:
        argv.append(f"--table_flags={args.table_flags}")  # '=': flags begin with '-'
    if args.run_flags:
        argv.append(f"--run_flags={args.run_flags}")
    if args.variants:
        argv += ["--variants", *args.variants]
    if "handout" in parts and args.handout_flags:
        argv.append(f"--handout_flags={args.handout_flags}")
    if "command" in parts:
        argv.append(f"--command={args.command}")
    if args.carry_mib != CARRY_MIB:
        argv += ["--carry_mib", f"{args.carry_mib:g}"]
    limits = [f"{part}={seconds:g}" for part, seconds in args.limits.items() if part in parts]
    argv += ["--limits", *limits] if limits else []
    return 'python tools/gpu_check.py "$OUT" ' + shlex.join(argv)


def carry_lines(args, parts, pieces):
    """What the next call takes, for the parts not finished: the table's pieces copied into
    CARRY and carried, and its command."""
    if not parts:
        return ["every part finished"]
    command = next_command(args, parts)
    if "table" not in parts:
        return ["next call, for the parts left:", f"    {command}"]
    if pieces:
        copy = f"copy {' '.join(pieces)} (from OUT) into {CARRY}/"
        return [
            f"next call: {copy}, carry data and {CARRY}, and run",
            f"    {command} --resume_from {CARRY}",
        ]
    if args.resume_from:  # the table did not start: the same folder again
        return [
            f"next call: carry data and {args.resume_from} again, and run",
            f"    {command} --resume_from {shlex.quote(args.resume_from)}",
        ]
    return ["next call: carry data, and run", f"    {command}"]


def table(check):
    """The whole table by ./run.sh in OUT/table, then packed into pieces for the next call."""
    args, work = check.args, check.out / "table"
    work.mkdir(parents=True, exist_ok=True)
    if args.resume_from:
        restore(Path(args.resume_from), work)
    shutil.copy(ROOT / "run.sh", work / "run.sh")  # run.sh runs the src/ beside it
    if not (work / "src").is_symlink():
        (work / "src").symlink_to(ROOT / "src")  # whose real parent holds data/ (files.py)
    flags = [*shlex.split(args.table_flags), *shlex.split(args.run_flags)]
    flags += ["--variants", *args.variants] if args.variants else []
    resumed = f", resumed from {args.resume_from}" if args.resume_from else ""
    check.note("", f"## `./run.sh {shlex.join(flags)}` in OUT/table{resumed}")
    log = work / "logs" / "run.sh.log"
    ended = check.run("table", ["./run.sh", *flags], own_limit(args, "table"), log, work)
    if ended is None:
        shutil.rmtree(work)
        return None
    results = work / "results.json"
    written = not ended.cut and ended.code in (0, 1) and results.exists()  # 1: a row failed
    if written:
        check.note("", *(work / "results.md").read_text(encoding="utf-8").splitlines())
    else:
        check.note("", "The tasks' records (logs/tasks/*.json):", "", *records_table(work))
    if written and ended.code == 1:  # say where, from the failed rows' logs
        for row in json.loads(results.read_text(encoding="utf-8"))["rows"]:
            if row.get("failed"):
                check.note("", f"{row['name']} failed; the end of {row['log']}:")
                check.note(*code_block(tail(work / row["log"], 8)))
    check.table_pieces, carried = pack(work, "table", int(args.carry_mib * 2**20))
    shutil.rmtree(work)  # the pieces hold what a call brings back of it
    mib = sum((check.out / piece).stat().st_size for piece in check.table_pieces) / 2**20
    check.note(
        "",
        f"Packed into {' '.join(check.table_pieces)} ({mib:.1f} MiB): every log, record and "
        f"prediction, and {', '.join(carried) or 'no params'}.",
    )
    return ended


def junit_lines(path, slowest):
    """A pytest JUnit report's counts, its failures' first lines and its slowest tests."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return ["no JUnit report was written"]
    counts, failures, times = {}, [], []
    for case in root.iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        marks = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = marks[0].tag if marks else "passed"
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome in ("failure", "error"):
            message = (marks[0].get("message") or "").strip().splitlines() or [""]
            failures.append(f"{outcome.upper()} {test}: {message[0][:200]}")
        times.append((float(case.get("time") or 0), test))
    lines = [", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no tests"]
    lines += [*failures[:20], f"the {slowest} slowest:"]
    return lines + [f"{s:6.1f} s  {test}" for s, test in sorted(times, reverse=True)[:slowest]]


def tests(check, name, paths, slowest):
    """pytest on some tests into OUT/<name>.log; its counts and failures from a JUnit report."""
    report = Path(tempfile.mkdtemp(prefix="gpu_check-")) / f"{name}.xml"  # read, then removed
    # pytest.ini's addopts (-n auto) need pytest-xdist, which the suite uses where installed
    workers = name == "suite" and importlib.util.find_spec("xdist") is not None
    command = [sys.executable, "-m", "pytest", "-v", *([] if workers else ["-o", "addopts="])]
    command += [*paths, "-p", "no:cacheprovider", f"--junitxml={report}"]
    check.note("", f"## `pytest {' '.join(paths)}`")
    ended = check.run(name, command, own_limit(check.args, name), check.out / f"{name}.log")
    if ended is not None:
        check.note(*code_block(junit_lines(report, slowest)))
    shutil.rmtree(report.parent)
    return ended


def cuda_tests(check):
    cuda = ["tests/training/test_cuda.py", "tests/training/test_capture.py"]
    return tests(check, "cuda_tests", cuda, 10)


def suite(check):
    return tests(check, "suite", ["tests"], 25)


def demo(check):
    """./run.sh demo in OUT/demo: its scores from its tasks' records; packed without params."""
    folder = check.out / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**check.env, "DEMO_DIR": str(folder), "DEMO_FLAGS": check.args.run_flags}
    check.note("", f"## `./run.sh demo`, DEMO_FLAGS: {check.args.run_flags or 'none'}")
    command = [str(ROOT / "run.sh"), "demo"]
    ended = check.run("demo", command, own_limit(check.args, "demo"), folder / "demo.log", env=env)
    if ended is not None:
        check.note("", *records_table(folder))
        pieces, _ = pack(folder, "demo", 0)
        check.note("", f"Packed into {' '.join(pieces)}: its world, log, records and predictions.")
    shutil.rmtree(folder)
    return ended


def paces(check):
    """experiments/step_pace.py into OUT/paces.log, and the table it writes for people."""
    log = check.out / "paces.log"
    check.note("", "## vanilla's handout pretraining under each way of running its step")
    command = [sys.executable, "experiments/step_pace.py", "--epochs", "3"]
    ended = check.run("paces", command, own_limit(check.args, "paces"), log)
    if ended is not None:
        check.note("", *(line for line in tail(log, 100) if line.startswith(("vanilla's", "| "))))
    return ended


def dev_score(predictions):
    """'correct of total' of a predictions file against the dev people's places; '' without it."""
    try:
        predicted = predictions.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    places = [place for _, _, place in read_question_file(resolve_data_path(DEV))]
    return f"{sum(p == q for p, q in zip(predicted, places))} of {len(places)}"


def pretraining_reached(folder, argv, params):
    """Where a cut pretraining stopped, from its checkpoint: its epoch, of how many."""
    path = folder / f"{params}.ckpt"
    if not path.exists():
        return "no checkpoint"
    try:
        import torch  # needed only here

        from factgpt.table.tasks import Task

        # read, never set aside: the next call resumes from it
        saved = torch.load(path, map_location="cpu", weights_only=True)
        stages = Task("pretraining", argv, params).cfg.recipe.stages()
    except Exception as e:  # a line of the summary, whatever went wrong
        return f"its checkpoint not read: {e}"
    epochs = sum(stage.max_epochs for stage in stages)
    return f"stopped in epoch {saved['epoch'] + 1} of {epochs}, at step {saved['step']}"


def handout(check):
    """Vanilla's handout recipe as run.py commands in OUT/handout, each timed here; its dev
    scores from the predictions against data/; packed without params."""
    folder = check.out / "handout"
    folder.mkdir(parents=True, exist_ok=True)
    flags = [*shlex.split(check.args.handout_flags), *shlex.split(check.args.run_flags)]
    common, pre, fine = ["vanilla", "wiki.txt", *flags], "pretrain.params", "finetune.params"
    dev = ["--finetune_corpus_path", TRAIN, "--eval_corpus_path", DEV, "--outputs_path"]
    commands = dict(
        pretraining=["pretrain", *common, "--writing_params_path", pre],
        finetuning=["finetune", *common, "--reading_params_path", pre, "--writing_params_path",
                    fine, "--finetune_corpus_path", TRAIN],
        dev=["evaluate", *common, "--reading_params_path", fine, *dev, "dev.predictions"],
        frames=["evaluate", *common, "--readout", "frames", "--reading_params_path", pre, *dev,
                "frames.dev.predictions"],
    )  # fmt: skip
    check.note("", f"## The handout's vanilla, a run.py command each: `{shlex.join(flags)}`")
    ended = None
    for name, argv in commands.items():
        command = [sys.executable, RUN_PY, *argv]
        ended = check.run(name, command, HANDOUT_LIMITS[name], folder / f"{name}.log", folder)
        if ended is not None and ended.cut and name == "pretraining":
            check.note(f"  - {pretraining_reached(folder, argv, pre)}")
        if ended is None or not ended.finished:
            break
    for name, predictions in (("dev", "dev.predictions"), ("frames", "frames.dev.predictions")):
        check.note(f"- {name}: {dev_score(folder / predictions) or 'no predictions'}")
    pieces, _ = pack(folder, "handout", 0)
    check.note("", f"Packed into {' '.join(pieces)}: the commands' logs and predictions.")
    shutil.rmtree(folder)
    return ended


def command(check):
    """--command's command line, from the repository root, into OUT/command.log."""
    check.note("", f"## `{check.args.command}`")
    argv = shlex.split(check.args.command)
    return check.run("command", argv, own_limit(check.args, "command"), check.out / "command.log")


RUNS = {run.__name__: run for run in (table, cuda_tests, demo, suite, paces, handout, command)}


def header(check):
    """The summary's first lines: when, which commit, which GPU, torch and CUDA."""
    try:  # a copy of the working tree may have no git
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
        commit = git.stdout.decode().strip() or "unknown"
    except OSError:
        commit = "unknown"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    check.note(f"# GPU check, {now}, commit {commit}", "")
    check.note(f"parts: {' '.join(check.args.parts)}; deadline {check.args.deadline:g} s", "")
    lines = ["no nvidia-smi: no GPU samples"]
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,memory.total,driver_version"
        command = ["nvidia-smi", query, "--format=csv,noheader"]
        lines = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()
    versions = "'torch', torch.__version__, 'CUDA', torch.version.cuda, os.cpu_count(), 'cores'"
    versions = f"import os, torch; print({versions})"
    done = subprocess.run([sys.executable, "-c", versions], capture_output=True, text=True)
    check.note(*code_block(lines + (done.stdout or done.stderr).strip().splitlines()[-1:]))


def start_sampler(out):
    """nvidia-smi's memory and utilisation every second into OUT/gpu_samples.csv, where it is."""
    if not shutil.which("nvidia-smi"):
        return None
    query = "--query-gpu=timestamp,memory.used,memory.total,utilization.gpu"
    with open(out / "gpu_samples.csv", "wb") as f:
        command = ["nvidia-smi", query, "--format=csv", "-l", "1"]
        return subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def closing(check):
    """The summary's end: what the next call takes, and what of OUT a call brings back."""
    left = [part for part in check.args.parts if not check.finished.get(part)]
    check.note("", "## Next", "", *carry_lines(check.args, left, check.table_pieces))
    paths = [path for path in sorted(check.out.rglob("*")) if path.is_file()]
    mib = {str(path.relative_to(check.out)): path.stat().st_size / 2**20 for path in paths}
    check.note("", f"OUT holds {len(mib)} files, {sum(mib.values()):.1f} MiB:", "")
    check.note(*(f"- {name}: {size:.1f} MiB" for name, size in mib.items()))
    too_large = max(mib.values(), default=0) > FILE_BACK_MIB or sum(mib.values()) > ALL_BACK_MIB
    if len(mib) > FILES_BACK or too_large:
        check.note(
            f"- more than a call brings back ({FILES_BACK} files, {FILE_BACK_MIB} MiB each, "
            f"{ALL_BACK_MIB} MiB in all): run fewer parts a call"
        )


def part_seconds(text):
    """--limits' PART=SECONDS, as (part, seconds)."""
    part, _, seconds = text.partition("=")
    try:
        if part in LIMITS and float(seconds) > 0:
            return part, float(seconds)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text}: give PART=SECONDS, seconds above 0, for a part of {', '.join(LIMITS)}")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", help="the folder whose files come back from the GPU machine")
    parts = dict(choices=RUNS, default=["table"], metavar="PART")
    order = f"in this order, of {', '.join(RUNS)} (default: table)"
    parser.add_argument("--parts", nargs="+", **parts, help=order)
    parser.add_argument("--deadline", type=float, default=DEADLINE, help=f"default {DEADLINE} s")
    parser.add_argument("--table_flags", default="--precision tf32", help="run.sh's flags")
    parser.add_argument("--run_flags", default="", help="added to every run.sh and run.py command")
    parser.add_argument("--variants", nargs="+", help="the table's pretrained ones (default: all)")
    parser.add_argument("--handout_flags", default="", help="the handout part's run.py flags")
    parser.add_argument("--resume_from", help="a previous call's table: its pieces' folder, or it")
    parser.add_argument("--command", help="the command part's command line (a check of one's own)")
    parser.add_argument("--carry_mib", type=float, default=CARRY_MIB, help="MiB of params packed")
    limits = ", ".join(f"{part} {seconds}" for part, seconds in LIMITS.items())
    parser.add_argument("--limits", nargs="+", type=part_seconds, default=[], metavar="PART=SECONDS",
                        help=f"parts' own limits instead of the defaults ({limits})")  # fmt: skip
    parser.add_argument("--plan", action="store_true", help="print the seconds each part would get, and run none")
    args = parser.parse_args(argv)
    args.limits = dict(args.limits)
    if args.resume_from and "table" not in args.parts:
        parser.error("--resume_from goes with the table part")
    if "command" in args.parts and not args.command:
        parser.error("the command part runs --command: give it")
    if args.resume_from and not Path(args.resume_from).exists():
        parser.error(f"--resume_from {args.resume_from}: no such file or folder")
    return args


def interrupted(signum, frame):
    raise KeyboardInterrupt  # SIGTERM as SIGINT: the part in hand is stopped, the summary written


def main(argv=None):
    args = parse_args(argv)
    if args.plan:
        print("\n".join(plan_lines(args)))
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").unlink(missing_ok=True)
    check = Check(out, args)
    previous = signal.signal(signal.SIGTERM, interrupted)
    header(check)
    sampler = start_sampler(out)
    try:
        for part in args.parts:
            ended = RUNS[part](check)
            check.finished[part] = ended is not None and ended.finished
    except KeyboardInterrupt:
        check.note("", "interrupted: the parts after this one not run")
    finally:
        if sampler is not None:
            signal_group(sampler, signal.SIGTERM)
            sampler.wait()
        closing(check)
        signal.signal(signal.SIGTERM, previous)
    print(check.summary.read_text(encoding="utf-8"))
    return 0 if all(check.finished.get(part) for part in args.parts) else 1


if __name__ == "__main__":
    sys.exit(main())
