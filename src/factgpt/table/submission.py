"""
assignment5.zip (collect_submission.sh): the course's modules with every module of src/ they import,
and an edition's params and predictions, as the course's submission expects them.

    ./collect_submission.sh [all|2021|2023|2024]

2021 is the edition with the synthesizer, 2023 with the perceiver, 2024 with rope; all (the
default) holds the three. A missing file fails the call, naming every one, before anything is
written; a failing call also removes an earlier assignment5.zip, so that no zip is left that this
call did not build. It names the recipe the params were trained with, and warns in one line where
that is not the course's.
"""

import ast
import json
import sys
import zipfile
from pathlib import Path

ZIP = Path("assignment5.zip")
COURSE_RECIPE = "handout"  # the recipe the course's handouts set their marks for
# the modules the course's autograders import or run, flat in src/
COURSE_MODULES = ("run", "dataset", "model", "models", "attention", "trainer", "utils")
COURSE_MODULES += ("london_baseline",)
EDITIONS = {"2021": ("synthesizer",), "2023": ("perceiver",), "2024": ("rope",)}
EDITIONS["all"] = ("perceiver", "synthesizer", "rope")


def variant_files(variant):
    """A variant's course files: its params and the finetuned params' predictions (the table's
    zero-shot readout writes <variant>.frames.*, which stay out)."""
    kinds = ("pretrain.params", "finetune.params", "pretrain.dev.predictions")
    return [f"{variant}.{kind}" for kind in (*kinds, "pretrain.test.predictions")]


def edition_files(edition):
    """The params and predictions of an edition: vanilla's with and without pretraining, and its
    variants'."""
    common = ["vanilla.model.params", "vanilla.nopretrain.dev.predictions"]
    common += ["vanilla.nopretrain.test.predictions", *variant_files("vanilla")]
    return common + [name for variant in EDITIONS[edition] for name in variant_files(variant)]


def params_recipes(params_files):
    """
    The recipe each params file was trained with, from the metadata beside it (<params>.json), by
    recipe: "unknown" where there is none (the course's own code writes none) or it cannot be read.
    """
    recipes = {}
    for name in params_files:
        try:
            recipe = json.loads(Path(name + ".json").read_text(encoding="utf-8"))["recipe"]
        except (OSError, ValueError, TypeError, KeyError):
            recipe = "unknown"
        recipes.setdefault(str(recipe), []).append(name)
    return recipes


def module_file(src, name):
    """The file of module `name` under src/ (a package's __init__.py), or None outside it."""
    path = src.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(src, path):
    """The modules under src/ that the file at `path` imports, its packages' __init__ included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {module_file(src, name) for name in found} - {None}


def course_sources(src):
    """The course's modules and every module of src/ that they import, directly or not."""
    todo = [src / f"{name}.py" for name in COURSE_MODULES]
    seen = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += imported_modules(src, path)
    return sorted(seen)


def main(argv):
    ZIP.unlink(missing_ok=True)
    if len(argv) > 1:
        print(
            "collect_submission.sh: takes at most one argument (all, 2021, 2023 or 2024), got "
            f"{len(argv)}: {' '.join(argv)}",
            file=sys.stderr,
        )
        return 2
    edition = argv[0] if argv else "all"
    if edition not in EDITIONS:
        print(
            f"collect_submission.sh: unknown edition '{edition}' (use all, 2021, 2023 or 2024)",
            file=sys.stderr,
        )
        return 2
    sources = [str(path) for path in course_sources(Path("src"))]
    outputs = edition_files(edition)
    missing = [name for name in [*sources, *outputs] if not Path(name).is_file()]
    if missing:
        print(
            f"collect_submission.sh: missing {' '.join(missing)} (run ./run.sh first)",
            file=sys.stderr,
        )
        return 1
    recipes = params_recipes([name for name in outputs if name.endswith(".params")])
    if set(recipes) - {COURSE_RECIPE}:
        print(
            f"collect_submission.sh: warning: the params were trained with the recipe "
            f"{' and '.join(sorted(recipes))}, not the course's ({COURSE_RECIPE}): the course's "
            "marks were set for its own",
            file=sys.stderr,
        )
    partial = ZIP.with_name(ZIP.name + ".tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for name in [*sources, *outputs]:
            z.write(name)
    partial.replace(ZIP)
    print(
        f"wrote {ZIP} ({len(sources)} modules, the course's and what they import, and "
        f"{len(outputs)} params and predictions files; the params trained with the recipe "
        f"{' and '.join(sorted(recipes))})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
