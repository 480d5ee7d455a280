"""The house rules a contributor keeps (CONTRIBUTING.md): measured figures live in docs/ or a bench's output, not in
source comments; every product file is in its part's docs table; one version source; product modules that share
a name mean the same thing by it."""

import ast
import io
import os
import re
import subprocess
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A measured figure: an instruction count, a per-call timing (a sub-millisecond unit, or milliseconds per call,
# request, ...), a pass rate (runs in runs), a measured ratio (a decimal with an x), a throughput (events per
# second), or a number of four digits or more in a comment that names a profiler (the cases below show each).
# A memory size given as the reason for a choice may stay.
FIGURE = re.compile(
    r"""\d[\d,.]*\s*[kKM]?\s*instructions\b
    |\d+(?:\.\d+)?\s*(?:ns|us|µs|μs)\b
    |\d+(?:\.\d+)?\s*ms\s+(?:per|an?|each)\s+(?:call|request|event|answer|incident|frame|scrape)\b
    |\b\d+\s+runs?\s+in\s+\d+\b
    |\b\d+\s+in\s+\d+\s+(?:runs|pass|passes|passed|fail|fails|failed)\b
    |\b\d+(?:\.\d+)?\s*%\s+of\s+(?:the\s+)?runs\b
    |\b\d+\.\d+x\b
    |\d[\d,.]*\s*k?\s*(?:events|requests|alarms|incidents)/s\b""",
    re.X | re.I,
)
PROFILED = re.compile(r"\b(?:callgrind|cachegrind|py-spy|perf stat|timeit)\b", re.I)
BIG_NUMBER = re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d{4,}\b")


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split() if not p.startswith(("tests/fixtures/", "tests/vectors/"))]


def comments(path):
    """(line, text) of every comment and docstring of a Python file, or every comment line of a shell/JS/C file."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        src = f.read()
    if path.endswith(".py"):
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield node.body[0].lineno, doc
        return
    for i, line in enumerate(src.splitlines(), 1):
        s = line.strip()
        if s.startswith(("#", "//", "/*", "*")) and not s.startswith("#!"):
            yield i, s


def figures_in(text):
    found = [m.group(0) for m in FIGURE.finditer(text)]
    if PROFILED.search(text):
        found += BIG_NUMBER.findall(text)
    return found


def test_no_measured_figures_in_source_comments():
    bad = []
    for path in tracked("*.py", "*.sh", "*.mjs", "*.c", "Makefile"):
        for line, text in comments(path):
            for fig in figures_in(text):
                bad.append("%s:%d: %r" % (path, line, fig))
    assert not bad, "measured figures belong in docs/ or a bench's output, not in comments:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "text",
    [
        "# about 1,000 instructions less (callgrind)",
        "# 0.8 against 2.2 us per answer",
        "# it hung about 1 run in 10",
        "# 8 in 8 pass with this",
        "# 19.3-22.3k against 17.3-18.5k requests/s",
        "# median 1.27x the Go gateway",
        "# 10,100 against 24,200 for the full path (callgrind)",
        '"""waitress spent about 170 µs of CPU per request"""',
    ],
)
def test_the_figure_scan_finds_each_kind(text):
    assert figures_in(text), text


@pytest.mark.parametrize(
    "text",
    [
        "# ~14 KB on the 64-bit Unix port: a block a fragmented heap cannot give",  # a memory size as the reason
        "# a terminal that takes 1 s per request, as a board busy speaking",
        "# each node's 8 GPUs in turn (so 1 in 8 requests is news)",
        "# timeout 200 ms; back-off 2 s doubling to 60 s",
    ],
)
def test_the_figure_scan_leaves_reasons_alone(text):
    assert not figures_in(text), text


# Each product directory and the doc whose table lists its files: the table is the first one after the line that
# names the directory in backticks.
DOC_TABLES = [
    ("host_client", "CONTRIBUTING.md"),
    ("host_client/gateway", "docs/GATEWAY.md"),
    ("host_client/probes", "docs/PROBES.md"),
    ("host_client/remedy", "docs/REMEDY.md"),
    ("emulator", "docs/EMULATOR.md"),
    ("firmware/lib/sentinel_core", "docs/SHELL_CONTRACT.md"),
    ("firmware/lib/sentinel_fw", "docs/FIRMWARE.md"),
]


def doc_table(doc, directory):
    """The file names in the first column of the doc's table for directory."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next((i for i, ln in enumerate(lines) if "`%s/`" % directory in ln), None)
    assert start is not None, "%s names no `%s/`" % (doc, directory)
    i = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    names = set()
    while i < len(lines) and lines[i].startswith("|"):
        names.update(re.findall(r"`([\w.]+)`", lines[i].split("|")[1]))
        i += 1
    return names


@pytest.mark.parametrize("directory,doc", DOC_TABLES)
def test_every_product_file_is_in_its_docs_table(directory, doc):
    files = {
        os.path.basename(p)
        for p in tracked(directory + "/*.py", directory + "/*.c")
        if os.path.dirname(p) == directory and not p.endswith("__init__.py")
    }
    table = doc_table(doc, directory)
    assert not files - table, "%s's table for %s/ lacks %s" % (doc, directory, sorted(files - table))
    assert not table - files, "%s's table for %s/ names files that are gone: %s" % (doc, directory, table - files)


def test_one_version_source():
    """sentinel_core.VERSION: what the distribution is built as, host_client.__version__ and the board's status."""
    import host_client
    import sentinel_core

    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M), "pyproject.toml takes the version from the code"
    assert not re.search(r"^version\s*=", pyproject, re.M)
    assert 'attr = "sentinel_core.VERSION"' in pyproject
    assert re.fullmatch(r"\d+\.\d+\.\d+", sentinel_core.VERSION) and host_client.__version__ == sentinel_core.VERSION
    hits = [
        p
        for p in tracked("*.py", "*.toml", "*.cfg")
        if p != "firmware/lib/sentinel_core/__init__.py"
        and re.search(
            r"^(__version__|version|VERSION)\s*=\s*['\"]\d+\.\d+\.\d+['\"]",
            open(os.path.join(ROOT, p), encoding="utf-8").read(),
            re.M,
        )
    ]
    assert not hits, "a second version string: %s" % hits


# Module names two product packages share, and what both mean by it; any other shared name is a clash to rename.
SHARED_NAMES = {
    "__init__.py": "a package",
    "__main__.py": "python -m",
    "config.py": "the part's config file, checked",
    "cli.py": "the part's command line",
    "server.py": "the part's HTTP server",
    "metrics.py": "the part's /metrics page",
    "events.py": "the GPU event body the probe sends and the gateway takes",
    "errors.py": "the part's exceptions",
    "persist.py": "what of the part's state survives a restart, and how it is written",
    "logs.py": "the structured log, in the one dialect of host_client/logs.py",
}


def test_product_modules_that_share_a_name_mean_the_same():
    product = [
        p
        for p in tracked("*.py")
        if p.startswith(("host_client/", "emulator/", "firmware/lib/", "firmware/main.py", "firmware/boot.py"))
    ]
    seen = {}
    for p in product:
        seen.setdefault(os.path.basename(p), []).append(p)
    clashes = {n: ps for n, ps in seen.items() if len(ps) > 1 and n not in SHARED_NAMES}
    assert not clashes, "one name, two meanings: %s" % clashes


def test_tests_readme_names_every_product_module_and_test_file():
    """tests/README.md maps each product module to its tests: a new module or test file gets its row."""
    with open(os.path.join(ROOT, "tests", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    missing = []
    for p in tracked("*.py"):
        if p.startswith(("host_client/", "emulator/", "firmware/lib/")) and not p.endswith("__init__.py"):
            mod = p[len("firmware/lib/") :] if p.startswith("firmware/lib/") else p
            name = mod[:-3].replace("/", ".")
            if "`%s`" % name not in readme:
                missing.append(name)
        elif p.startswith("tests/test_") and "`%s`" % os.path.basename(p) not in readme:
            missing.append(p)
    assert not missing, "tests/README.md does not name: %s" % missing


@pytest.mark.parametrize(
    "message,code,says",
    [
        ("Gateway: one back-off rule\n\nThe why, with figures.\n", 0, ""),
        ("x" * 73 + "\n", 1, "the subject is 73 characters, at most 72"),
        ("Subject\nbody without a blank line\n", 1, "a blank line goes between the subject and the body"),
        ("# only a comment\n", 1, "no subject"),
    ],
)
def test_commit_msg_hook_refuses_long_subjects_in_one_line(tmp_path, message, code, says):
    import sys

    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(message, encoding="utf-8")
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "check_commit_subject.py"), str(msg)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == code and says in r.stderr and len(r.stderr.splitlines()) == (1 if code else 0)


def test_pre_commit_config_is_valid_and_runs_make_tests_first_checks():
    import sys

    cfg = os.path.join(ROOT, ".pre-commit-config.yaml")
    r = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", cfg], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(cfg, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(ROOT, "tools", "run-tests.sh"), encoding="utf-8") as f:
        run_tests = f.read()
    for args in ("format --check", "check"):
        assert "ruff " + args in text and '/ruff" %s .' % args in run_tests


# The gateway's HTTP front in uvicorn's three parts (docs/GATEWAY.md): imports go one way, loop -> connection and
# application, and neither of those two imports the loop, nor each other.
FRONT_NEVER_IMPORTS = {
    "application": {"server", "connection"},
    "connection": {"server", "application", "service"},
    "answers": {"server", "connection", "application", "service"},
    "service": {"server", "connection", "application", "answers"},
    "metrics": {"server", "connection", "application", "answers"},
}


def gateway_imports(module, root=ROOT):
    """The host_client.gateway modules a gateway module imports (relative or absolute, at any depth)."""
    path = os.path.join(root, "host_client", "gateway", module + ".py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:
                found.add(mod.split(".")[0] if mod else "")
                if not mod:
                    found.update(a.name for a in node.names)
            elif mod.startswith("host_client.gateway"):
                rest = mod[len("host_client.gateway") :].lstrip(".")
                found.add(rest.split(".")[0] if rest else "")
                if not rest:
                    found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("host_client.gateway."):
                    found.add(a.name.split(".")[2])
    return found - {""}


@pytest.mark.parametrize("module", sorted(FRONT_NEVER_IMPORTS))
def test_the_gateway_front_imports_one_way(module):
    wrong = gateway_imports(module) & FRONT_NEVER_IMPORTS[module]
    assert not wrong, "host_client/gateway/%s.py imports %s (docs/GATEWAY.md, the HTTP front)" % (module, sorted(wrong))


def test_the_import_check_sees_each_form(tmp_path):
    """gateway_imports reads relative, absolute and package-level imports, inside functions too."""
    gw = tmp_path / "host_client" / "gateway"
    gw.mkdir(parents=True)
    (gw / "probe.py").write_text(
        "from .server import x\nfrom . import connection\nimport host_client.gateway.application\n"
        "def f():\n    from host_client.gateway.answers import y\n"
    )
    assert gateway_imports("probe", str(tmp_path)) == {"server", "connection", "application", "answers"}


def test_one_python_version_in_the_tools():
    """ruff and pyright check the oldest Python the package says it runs on (requires-python), the same one."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pp = tomllib.load(f)
    floor = re.fullmatch(r">=\s*3\.(\d+)", pp["project"]["requires-python"])
    assert floor, "requires-python is a floor, >=3.N"
    minor = floor.group(1)
    assert pp["tool"]["ruff"]["target-version"] == "py3" + minor
    assert pp["tool"]["pyright"]["pythonVersion"] == "3." + minor
    assert set(pp["tool"]["pyright"]["include"]) >= {"host_client", "emulator"}
