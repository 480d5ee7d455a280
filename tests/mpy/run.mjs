// Runs the shared core's tests (and the firmware's, with --suite firmware) under real MicroPython:
// the WebAssembly build on Node.js. Files are loaded from the repository, never from a copy.
//
//   node tests/mpy/run.mjs                    # tests/core/*.py
//   node tests/mpy/run.mjs render tts         # only those modules
//   node tests/mpy/run.mjs --suite firmware   # tests/firmware/*.py with fakes of machine, neopixel, network
//
// Contract per test module: every `test_*` function is one check (async ones are awaited); a module with
// VECTORS = "x.json" and run_case(case) runs one check per entry of the file's `cases` list.
import { loadMicroPython } from "@micropython/micropython-webassembly-pyscript";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");

let suite = "core";
const only = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--suite") suite = argv[++i];
  else only.push(argv[i].replace(/\.py$/, ""));
}

function copyTree(mp, src, dst, filter) {
  try { mp.FS.mkdir(dst); } catch (e) { /* exists */ }
  for (const ent of fs.readdirSync(src, { withFileTypes: true })) {
    if (ent.name === "__pycache__" || ent.name.startsWith(".")) continue;
    const s = path.join(src, ent.name);
    const d = dst + "/" + ent.name;
    if (ent.isDirectory()) copyTree(mp, s, d, filter);
    else if (!filter || filter(ent.name)) mp.FS.writeFile(d, fs.readFileSync(s));
  }
}

function microdotDir() {
  if (process.env.MICRODOT_DIR) return process.env.MICRODOT_DIR;
  const py = path.join(root, ".venv", "bin", "python");
  const out = execFileSync(py, ["-c", "import microdot, os; print(os.path.dirname(microdot.__file__))"]);
  return out.toString().trim();
}

let out = "";
const mp = await loadMicroPython({
  heapsize: 8 * 1024 * 1024,
  stdout: (s) => { process.stdout.write(s + "\n"); },
  stderr: (s) => { process.stderr.write(s + "\n"); },
  linebuffer: true,
});

const testDir = path.join(root, "tests", suite);
copyTree(mp, path.join(root, "firmware", "lib"), "/lib", (n) => n.endsWith(".py"));
copyTree(mp, path.join(root, "tests", "vectors"), "/vectors", (n) => n.endsWith(".json"));
copyTree(mp, path.join(root, "tests", "core"), "/tests_core", (n) => n.endsWith(".py"));
copyTree(mp, testDir, "/tests", (n) => n.endsWith(".py"));
if (suite === "firmware") {
  const fakes = path.join(testDir, "fakes");
  if (fs.existsSync(fakes)) copyTree(mp, fakes, "/lib", (n) => n.endsWith(".py"));
  copyTree(mp, microdotDir(), "/lib/microdot", (n) => n.endsWith(".py"));
  // The board's top-level files, importable as modules for tests.
  try { mp.FS.mkdir("/board"); } catch (e) { /* exists */ }
  for (const n of ["boot.py", "main.py"]) {
    const p = path.join(root, "firmware", n);
    if (fs.existsSync(p)) mp.FS.writeFile("/board/" + n, fs.readFileSync(p));
  }
}

const modules = fs.readdirSync(testDir)
  .filter((n) => n.endsWith(".py") && !n.startsWith("_"))
  .map((n) => n.slice(0, -3))
  .filter((n) => only.length === 0 || only.includes(n))
  .sort();

const driver = `
import sys, json, gc
sys.path.append("/tests")
sys.path.append("/tests_core")
sys.path.append("/board")
_passed = 0
_failed = 0
_fail_lines = []
async def _check(label, fn, arg=None, has_arg=False):
    global _passed, _failed
    try:
        r = fn(arg) if has_arg else fn()
        if r is not None and hasattr(r, "send"):
            await r
        _passed += 1
    except Exception as e:
        _failed += 1
        _fail_lines.append("FAIL %s: %s: %s" % (label, type(e).__name__, e))
async def _run_module(name):
    try:
        m = __import__(name)
    except Exception as e:
        global _failed
        _failed += 1
        _fail_lines.append("FAIL import %s: %s: %s" % (name, type(e).__name__, e))
        return
    for attr in sorted(dir(m)):
        if attr.startswith("test_"):
            await _check("%s.%s" % (name, attr), getattr(m, attr))
    vec = getattr(m, "VECTORS", None)
    if vec and hasattr(m, "run_case"):
        with open("/vectors/" + vec) as f:
            cases = json.load(f)["cases"]
        for i, case in enumerate(cases):
            label = "%s[%s]" % (name, case.get("name", i) if isinstance(case, dict) else i)
            await _check(label, m.run_case, case, True)
        cases = None
    gc.collect()
for _name in ${JSON.stringify(modules)}:
    _before = _passed + _failed
    await _run_module(_name)
    print("  %-28s %d checks" % (_name, _passed + _failed - _before))
for _l in _fail_lines:
    print(_l)
print("micropython-%s: %d passed, %d failed" % ("${suite}", _passed, _failed))
`;

let code = 0;
try {
  await mp.runPythonAsync(driver);
  const failed = mp.runPython("_failed");
  const passed = mp.runPython("_passed");
  if (failed > 0 || passed === 0) code = 1;
} catch (e) {
  console.error("runner error:", e.type || "", e.message || e);
  code = 2;
}
process.exit(code);
