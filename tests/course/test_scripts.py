"""src/'s other scripts: dataset.py's examples and the baselines of london_baseline.py."""

import subprocess
import sys

import dataset
import london_baseline
from conftest import ROOT


def test_dataset_module_prints_examples(tiny_world, capsys):
    """Four decoded examples of each kind, masked; charcorruption's from a fresh interpreter, as a user runs it."""
    data = ["--pretrain_corpus_path", tiny_world["wiki.txt"], "--finetune_corpus_path", tiny_world["train.tsv"]]
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "dataset.py"), "charcorruption", *data],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.count("x: ") == 4 and "\u2047" in done.stdout
    capsys.readouterr()
    assert dataset.main(["namedata", *data]) == 0
    out = capsys.readouterr().out
    assert out.count("x: ") == 4 and "\u2047" in out


def baseline(capsys, *argv):
    """london_baseline.py's main in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = london_baseline.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_london_baseline(a5_dir, capsys):
    code, out, _ = baseline(capsys, a5_dir / "birth_dev.tsv")
    assert code == 0 and out.strip() == "Correct: 25 out of 500: 5.0%"


def test_most_frequent_place_baseline(tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("Where was A born?\tLima\nWhere was B born?\tOslo\nWhere was C born?\tOslo\n", encoding="utf-8")
    dev = tmp_path / "dev.tsv"
    dev.write_text("Where was D born?\tOslo\nWhere was E born?\tParis\nWhere was F born?\tLima\n", encoding="utf-8")
    code, out, _ = baseline(capsys, dev, "--most_frequent_in", train)
    assert code == 0 and out.strip() == "Correct: 1 out of 3: 33.33%"
    assert baseline(capsys, dev)[1].strip() == "Correct: 0 out of 3: 0.0%"
    code, _, err = baseline(capsys, tmp_path / "none.tsv")
    assert code == 2 and "none.tsv" in err and "Traceback" not in err


def test_london_baseline_starts_without_torch(tmp_path):
    """run.sh and the demo run it once each: without torch's import it answers in a fraction of a second."""
    dev = tmp_path / "dev.tsv"
    dev.write_text("Where was D born?\tLondon\nWhere was E born?\tParis\n", encoding="utf-8")
    check = f"import sys; sys.argv = ['london_baseline.py', {str(dev)!r}]; sys.path.insert(0, {str(ROOT / 'src')!r})\n"
    check += "import london_baseline\nlondon_baseline.main()\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines() == ["Correct: 1 out of 2: 50.0%", "False"], done.stderr
