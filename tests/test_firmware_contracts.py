"""The board's named contracts (issue 14), read off the source: what no review should have to catch again.

- no module of the board's libraries reaches into another object's or module's private members (restore and
  terminal_config imported terminal's _check_now, _is_int, _is_num; build called Sentinel._problem and
  app._forget);
- the board has one module-dropping helper (sentinel_fw.forget): startup had a copy of its own;
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
    """Dropping a module is sys.modules.pop in one function (sentinel_fw.forget); everything else calls it."""
    pops = []
    for name, tree in modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "pop":
                target = n.func.value
                if isinstance(target, ast.Attribute) and target.attr == "modules":
                    pops.append(name)
    assert pops == ["sentinel_fw"], pops


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


def _imports(name, tree, known):
    """The board modules that module name imports anywhere in its source (at its top or inside a function: a lazy
    import is still an edge of the graph), by parsing its import statements."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names if a.name in known)
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            if n.module in known:
                out.add(n.module)
            # `from sentinel_fw import ticks` imports the submodule ticks; `from sentinel_fw import log`, the package
            out.update(n.module + "." + a.name for a in n.names if n.module + "." + a.name in known)
    out.discard(name)
    return out


def import_cycles(graph):
    """Every strongly connected set of more than one module in graph ({module: modules it imports}), sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles_in_the_board_libraries():
    """firmware/lib imports one way: a helper both sides need sits in a module both import (alarm.is_int,
    wiring.ORDERS, the sentinel_fw package's log and forget), never copied, never in a circle (issue 38)."""
    mods = dict(modules())
    graph = {name: _imports(name, tree, mods) for name, tree in mods.items()}
    assert graph["sentinel_core.terminal"] and graph["sentinel_fw.build"]  # the parse sees imports at all
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_circle():
    # the shape issue 38 found: layout imports wiring inside a function, wiring imports layout at its top
    tree_a = ast.parse("def f():\n    from sentinel_core.wiring import wire\n")
    tree_b = ast.parse("from sentinel_core.layout import ORDERS\n")
    known = {"sentinel_core.layout": tree_a, "sentinel_core.wiring": tree_b}
    graph = {n: _imports(n, t, known) for n, t in known.items()}
    assert import_cycles(graph) == [["sentinel_core.layout", "sentinel_core.wiring"]]
