"""
lint-imports over src/ with the house's contract (.importlinter). import-linter takes only packages
as roots, so each of the course's flat modules is shown to it as a package whose __init__.py is
that module's own file (a link); the factgpt package is linked as it is. The import statements it
reads are the code's own.

    python tools/lint_imports.py [lint-imports flags]
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def main(argv):
    with tempfile.TemporaryDirectory(prefix="lint-imports-") as folder:
        view = Path(folder)
        for module in SRC.glob("*.py"):
            (view / module.stem).mkdir()
            (view / module.stem / "__init__.py").symlink_to(module)
        (view / "factgpt").symlink_to(SRC / "factgpt", target_is_directory=True)
        env = dict(os.environ, PYTHONPATH=str(view))
        command = ["lint-imports", str(ROOT / ".importlinter"), *argv]
        return subprocess.run(command, env=env, cwd=view).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
