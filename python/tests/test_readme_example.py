"""The README's Python example is examples/python/quickstart.py, and it runs; its C++ example is
examples/cpp/decode.cc (built and run by CTest: example_cpp_decode)."""

import pathlib
import runpy

import pytest

pytest.importorskip("numpy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "quickstart.py"
CPP_EXAMPLE = ROOT / "examples" / "cpp" / "decode.cc"


def test_readme_shows_the_example_file():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()


def test_example_runs(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert capsys.readouterr().out.split()[:1] == ["cpu"]


def test_readme_shows_the_cpp_example_file():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```cpp\n", 1)[1].split("```", 1)[0]
    assert block == CPP_EXAMPLE.read_text()
