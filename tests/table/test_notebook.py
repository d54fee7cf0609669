"""
The notebooks: mingpt-demo/play_char.ipynb (a character-level GPT on a text) and
assignment.ipynb (the assignment on Colab), committed without outputs, run top to bottom.
"""

import json
import os
import sys
import zipfile

import nbclient
import nbformat
import pytest

from conftest import ROOT

NOTEBOOK_DIR = ROOT / "mingpt-demo"
NOTEBOOK = NOTEBOOK_DIR / "play_char.ipynb"
ASSIGNMENT = ROOT / "assignment.ipynb"

# Appended in memory after the last cell: the results the notebook leaves in its variables.
REPORT = (
    "import json\n"
    'print("REPORT " + json.dumps({"first_loss": float(first_loss), "last_loss": float(last_loss), '
    '"prompt": prompt, "sampled": sampled}))'
)


@pytest.mark.parametrize("notebook", [NOTEBOOK, ASSIGNMENT], ids=["play_char", "assignment"])
def test_committed_without_outputs(notebook):
    nb = nbformat.read(notebook, as_version=4)
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


def this_interpreters_kernel(tmp_path, monkeypatch):
    """
    A kernel spec that runs this very interpreter, ahead of any other "python3" spec on the
    machine; Jupyter's runtime and IPython's profile folders go to tmp_path as well. Its name.
    """
    spec = tmp_path / "jupyter" / "kernels" / "notebook-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "test", "language": "python"}))
    monkeypatch.setenv(
        "JUPYTER_PATH", os.pathsep.join(filter(None, [str(tmp_path / "jupyter"), os.environ.get("JUPYTER_PATH")]))
    )
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "notebook-test"


@pytest.mark.slow
def test_notebook_runs_and_learns(tmp_path, monkeypatch):
    kernel = this_interpreters_kernel(tmp_path, monkeypatch)
    # the tiny settings, on the generated demo corpus (no third-party data needed)
    monkeypatch.setenv("PLAY_CHAR_TINY", "1")
    monkeypatch.setenv("PLAY_CHAR_TEXT", "world")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel,
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


@pytest.mark.slow
def test_assignment_notebook_runs_the_whole_assignment_on_the_demo_switch(tmp_path, monkeypatch):
    """DEMO on the CPU: a generated world, run.sh --jobs 2, the loss plotted, the table shown, the zip written."""
    kernel = this_interpreters_kernel(tmp_path, monkeypatch)
    work = tmp_path / "work"
    monkeypatch.setenv("ASSIGNMENT_DEMO", "1")
    monkeypatch.setenv("ASSIGNMENT_WORK", str(work))  # the run's files stay out of the checkout
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nb = nbformat.read(ASSIGNMENT, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=kernel, timeout=900, startup_timeout=120, resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError, with the traceback, if a cell fails

    table = json.loads((work / "results.json").read_text(encoding="utf-8"))
    pretrained = [f"{variant} with pretraining" for variant in ("vanilla", "perceiver", "synthesizer", "rope")]
    assert [row["name"] for row in table["rows"]] == ["London baseline", "vanilla without pretraining", *pretrained]
    assert not any(row.get("failed") for row in table["rows"])
    for row in table["rows"][2:]:  # both readouts, dev and test, scored from the dev file
        assert all(row["readouts"][readout][split] for readout in ("question", "frames") for split in ("dev", "test"))
        assert row["readouts"]["frames"]["dev"]["total"] == 10
    training = next(cell for cell in nb.cells if "training" in cell.metadata.get("tags", []))
    shown = stdout_of(training)
    assert "\r" in shown and "== finished: rope with pretraining" in shown  # bars redrawn in place, not a line each
    results = next(cell for cell in nb.cells if "results" in cell.metadata.get("tags", []))
    shown = [out for out in results.outputs if out.get("output_type") == "display_data"]
    assert sum("image/png" in out["data"] for out in shown) == 2  # the pretraining loss, the accuracies
    assert any("vanilla with pretraining" in out["data"].get("text/markdown", "") for out in shown)  # the table
    submission = next(cell for cell in nb.cells if "submission" in cell.metadata.get("tags", []))
    assert "wrote assignment5.zip" in stdout_of(submission)
    with zipfile.ZipFile(work / "assignment5.zip") as z:
        names = z.namelist()
    assert "src/run.py" in names and "rope.pretrain.test.predictions" in names and "vanilla.model.params" in names


def test_assignment_notebook_stops_in_one_line_without_a_gpu(tmp_path, monkeypatch):
    """Without a GPU and without DEMO, the notebook stops at its GPU check: no cpu recipe's hours start."""
    kernel = this_interpreters_kernel(tmp_path, monkeypatch)
    monkeypatch.delenv("ASSIGNMENT_DEMO", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nb = nbformat.read(ASSIGNMENT, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=kernel, timeout=120, startup_timeout=120, resources={"metadata": {"path": str(ROOT)}}
    )
    with pytest.raises(nbclient.exceptions.CellExecutionError) as stopped:
        client.execute()
    assert stopped.value.ename == "SystemExit" and stopped.value.evalue.startswith("No GPU: Runtime -> Change runtime")
    ran = [cell for cell in nb.cells if cell.cell_type == "code" and cell.execution_count is not None]
    assert "torch.cuda.is_available()" in ran[-1].source  # the last cell run: the GPU check
