"""The demo notebook mingpt-demo/play_char.ipynb: committed without outputs, and it runs top to bottom and learns."""

import json
import os
import sys

import pytest

from conftest import ROOT

nbformat = pytest.importorskip("nbformat")

NOTEBOOK_DIR = ROOT / "mingpt-demo"
NOTEBOOK = NOTEBOOK_DIR / "play_char.ipynb"

# Appended in memory after the last cell: the results the notebook leaves in its variables.
REPORT = (
    "import json\n"
    'print("REPORT " + json.dumps({"first_loss": float(first_loss), "last_loss": float(last_loss), '
    '"prompt": prompt, "sampled": sampled}))'
)


def test_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells
    for cell in code_cells:
        assert cell.outputs == [], cell.source[:60]
        assert cell.execution_count is None, cell.source[:60]


def stdout_of(cell):
    return "".join(
        out.get("text", "")
        for out in cell.outputs
        if out.get("output_type") == "stream" and out.get("name") == "stdout"
    )


@pytest.mark.slow
def test_notebook_runs_and_learns(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")

    # A kernel spec that runs this very interpreter, ahead of any other "python3" spec on the machine;
    # Jupyter's runtime and IPython's profile folders go to tmp_path as well.
    spec = tmp_path / "jupyter" / "kernels" / "play-char-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "test", "language": "python"}))
    monkeypatch.setenv(
        "JUPYTER_PATH", os.pathsep.join(filter(None, [str(tmp_path / "jupyter"), os.environ.get("JUPYTER_PATH")]))
    )
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    # the tiny settings, on the generated demo corpus (no third-party data needed)
    monkeypatch.setenv("PLAY_CHAR_TINY", "1")
    monkeypatch.setenv("PLAY_CHAR_TEXT", "world")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = nbclient.NotebookClient(
        nb,
        kernel_name="play-char-test",
        timeout=600,
        startup_timeout=120,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError, with the traceback, if a cell fails

    report = stdout_of(nb.cells[-1])
    assert report.startswith("REPORT "), report
    result = json.loads(report[len("REPORT ") :])
    assert result["last_loss"] < 0.85 * result["first_loss"], result

    sample_cells = [cell for cell in nb.cells if "sample" in cell.metadata.get("tags", [])]
    assert len(sample_cells) == 1
    printed = stdout_of(sample_cells[0])
    assert result["sampled"].startswith(result["prompt"]) and len(result["sampled"]) > len(result["prompt"])
    assert result["sampled"] in printed, printed
