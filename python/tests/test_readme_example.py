"""The README's Python example is examples/python/quickstart.py, and it runs."""

import pathlib
import runpy

import pytest

pytest.importorskip("numpy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "quickstart.py"


def test_readme_shows_the_example_file():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()


def test_example_runs(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert capsys.readouterr().out.split()[:1] == ["cpu"]
