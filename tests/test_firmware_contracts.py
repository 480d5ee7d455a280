"""The board's named contracts (issue 14), read off the source: what no review should have to catch again.

- no module of the board's libraries reaches into another object's or module's private members (restore and
  terminal_config imported terminal's _check_now, _is_int, _is_num; build called Sentinel._problem and
  app._forget);
- the board has one module-dropping helper (app.forget): startup had a copy of its own;
- a table looked up by an alarm level is keyed by the level's constant, not by its position in a tuple.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "firmware", "lib")
LEVELS = {"NORMAL", "P1", "P0"}


def modules(packages=("sentinel_fw", "sentinel_core")):
    """(name like 'sentinel_fw.build', parsed tree) for every module of these board library packages."""
    out = []
    for pkg in packages:
        for f in sorted(os.listdir(os.path.join(LIB, pkg))):
            if f.endswith(".py"):
                with open(os.path.join(LIB, pkg, f), encoding="utf-8") as fh:
                    name = pkg if f == "__init__.py" else pkg + "." + f[:-3]
                    out.append((name, ast.parse(fh.read(), f)))
    return out


def test_no_board_module_uses_another_objects_private_members():
    bad = []
    for name, tree in modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__"):
                if not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
                    bad.append("%s:%d: %s" % (name, n.lineno, ast.unparse(n)))
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("sentinel"):
                bad += [
                    "%s:%d: from %s import %s" % (name, n.lineno, n.module, a.name)
                    for a in n.names
                    if a.name.startswith("_")
                ]
    assert not bad, bad


def test_one_module_dropping_helper():
    """Dropping a module is sys.modules.pop in one function (app.forget); everything else calls it."""
    pops = []
    for name, tree in modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "pop":
                target = n.func.value
                if isinstance(target, ast.Attribute) and target.attr == "modules":
                    pops.append(name)
    assert pops == ["sentinel_fw.app"], pops


def _mentions_a_level(node):
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and (n.id in LEVELS or n.id == "level"):
            return True
        if isinstance(n, ast.Attribute) and n.attr == "level":
            return True
    return False


def test_tables_looked_up_by_a_level_are_keyed_by_it():
    # Module-level tuples and lists of the board's libraries, by name (a lookup may go through the module:
    # glyphs.LEVEL[level]). alarm.LEVEL_NAMES is the levels' own names in the order alarm.py numbers them, right
    # below the numbers; the host's gateway searches it as a sequence. Every other level-indexed table is a dict.
    seqs = set()
    for _name, tree in modules():
        for n in tree.body:
            if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Tuple, ast.List)):
                seqs.update(t.id for t in n.targets if isinstance(t, ast.Name))
    seqs.discard("LEVEL_NAMES")
    bad = []
    for name, tree in modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Subscript) and _mentions_a_level(n.slice):
                v = n.value
                table = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
                if table in seqs:
                    bad.append("%s:%d: %s" % (name, n.lineno, ast.unparse(n)))
    assert not bad, bad


def test_the_level_tables_answer_for_each_level():
    import sys

    sys.path.insert(0, LIB)
    try:
        from sentinel_core import alarm, glyphs, validate
    finally:
        sys.path.remove(LIB)
    assert glyphs.LEVEL == {alarm.NORMAL: glyphs.NORMAL, alarm.P1: glyphs.P1, alarm.P0: glyphs.P0}
    for name, preset in alarm.PRESETS.items():
        assert validate._PRESET_OF_LEVEL[preset["level"]] == name
        assert alarm.shared_color(tuple(preset["color"])) is preset["color"]
