"""Small fact readers: dist-info/egg-info lookup, Requires-Dist pins, versions, ast helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.facts import packages, source


def test_dist_info_and_egg_info(tmp_path: Path) -> None:
    di = tmp_path / "Foo_Bar-1.2.3.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: Foo-Bar\nVersion: 1.2.3\n"
                                 "Requires-Dist: baz==2.0\nRequires-Dist: qux>=1; extra == 'x'\n"
                                 "\nRequires-Dist: not-a-header==9\n")
    d = packages.get_dist("foo-bar", [str(tmp_path)])
    assert d is not None and d.version == "1.2.3"
    assert d.requires == ["baz==2.0", "qux>=1; extra == 'x'"]
    assert packages.pin_of(d.requires, "baz") == ("==2.0", None)
    assert packages.pin_of(d.requires, "qux") == (">=1", "extra == 'x'")
    egg = tmp_path / "legacy.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 0.9\n")
    e = packages.get_dist("legacy", [str(tmp_path)])
    assert e is not None and e.version == "0.9"
    assert packages.get_dist("absent", [str(tmp_path)]) is None


@pytest.mark.parametrize("v,t", [("0.7.2.post1", (0, 7, 2, 1)), ("0.6.14", (0, 6, 14, 0)),
                                 ("12.8", (12, 8, 0, 0)), ("2.26.2", (2, 26, 2, 0))])
def test_version_tuple(v: str, t: tuple[int, ...]) -> None:
    assert packages.version_tuple(v) == t
    assert packages.version_ge("0.7.2.post1", "0.7.2") and not packages.version_ge("0.6.13",
                                                                                   "0.6.14")


def test_is_local() -> None:
    assert packages.is_local("0.11.2.dev279+eldritch.g25dd814")
    assert packages.is_local("0.7.2.post1+cu129") and not packages.is_local("0.7.2.post1")


def test_ast_helpers_segment_and_fallback() -> None:
    src = ('import x\n\n@decorator\ndef f(a, b=1, *args, c: int = 2, **kw):\n    """doc\n'
           'def g(z): not a def inside a string\n"""\n    return a\n\nX = frozenset({(1, 2), '
           '(3, 4)})\nY = Envelope(3)\n\nclass C(Base):\n    flag = True\n    n: int = 4\n'
           '    other = compute()\n')
    assert source.function_params(src, "f") == ["a", "b", "c", "*args", "**kw"]
    assert source.function_params(src, "g") is None  # only top-level defs count
    assert source.module_assignment(src, "X") == frozenset({(1, 2), (3, 4)})
    with pytest.raises(ValueError):
        source.module_assignment(src, "Y")
    with pytest.raises(KeyError):
        source.module_assignment(src, "Z")
    assert source.class_attributes(src, "C") == {"flag": True, "n": 4, "other": ...}
